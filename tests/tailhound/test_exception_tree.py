"""One exception tree: every error tailhound raises on purpose is a TailhoundError, input errors an InputError."""

from tailhound.errors import InputError, InputTooLarge, MalformedMessage, PullError, TailhoundError
from tailhound.ingest.federation import FederationError
from tailhound.ingest.remote_write import RemoteWriteError
from tailhound.ingest.server import TooLarge


def test_input_errors_are_one_branch_of_the_tree():
    for cls in (MalformedMessage, InputTooLarge, PullError):
        assert issubclass(cls, InputError) and issubclass(cls, TailhoundError)


def test_the_ingest_errors_sit_in_the_tree_and_keep_what_callers_catch():
    assert issubclass(RemoteWriteError, MalformedMessage)
    assert issubclass(RemoteWriteError, ValueError)  # callers that catch ValueError still do
    err = RemoteWriteError("truncated", "a series runs past the end", 400)
    assert (err.reason, err.status, str(err)) == ("truncated", 400, "a series runs past the end")
    assert issubclass(FederationError, PullError)
    assert issubclass(TooLarge, InputTooLarge)
