"""The receiver rules of a notifier config, on plain data of any shape."""

from __future__ import annotations

from typing import get_args

import pytest

from tailhound.notifier.receiver_names import ReceiverIssue, receiver_issues
from tailhound.notifier.receivers.registry import RECEIVER_TYPES, ReceiverConfig


def test_a_valid_config_and_the_defaults_have_no_issue():
    assert receiver_issues({}) == []
    assert (
        receiver_issues(
            {"route": {"receiver": "a", "routes": [{"receiver": "a"}]}, "receivers": [{"type": "console", "name": "a"}]}
        )
        == []
    )


def test_each_rule_at_its_location():
    data = {
        "route": {"routes": [{"receiver": "b", "routes": [{"receiver": "nobody"}]}]},
        "receivers": [{"name": "a"}, {"name": "b"}, {"name": "a"}],
    }
    assert receiver_issues(data) == [
        ReceiverIssue(
            ("receivers", 2, "name"), "receivers[2].name: receiver 'a' is defined twice", first=("receivers", 0, "name")
        ),
        ReceiverIssue(
            ("route",),
            "route: the top-level route needs a receiver (the default for unmatched incidents)",
            "receivers: a, b",
            at_key=True,
        ),
        ReceiverIssue(
            ("route", "routes", 0, "routes", 0, "receiver"),
            "route.routes[0].routes[0].receiver: no receiver named 'nobody'",
            "receivers: a, b",
        ),
    ]


def test_without_a_route_the_default_receiver_must_exist():
    [issue] = receiver_issues({"receivers": [{"type": "console", "name": "pager"}]})
    assert issue.loc == ("receivers",) and issue.at_key and "receiver 'console'" in issue.message


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "route",
        {"receivers": "x"},
        {"receivers": [1, None, {"name": 3}]},
        {"route": ["x"]},
        {"route": {"routes": "x"}},
        {"route": {"routes": [1]}},
    ],
)
def test_any_shape_is_read_without_failing(data):
    receiver_issues(data)  # what is not the expected shape is the structure check's to report


def test_receiver_types_come_from_the_registry_union():
    assert RECEIVER_TYPES == ("console", "slack", "pagerduty", "webhook", "alertmanager")
    assert len(RECEIVER_TYPES) == len(get_args(ReceiverConfig))
