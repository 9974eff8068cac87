"""bench/child_profile.py: the sections and cProfile reports, and the patched functions put back."""

from __future__ import annotations

import gc

import tailhound.streams.evaluator
import tailhound.streams.model_forward
from bench.child_profile import Profile
from tailhound.snapshot import Snapshot


def _engine_snapshot() -> Snapshot:
    return Snapshot.model_validate(
        {
            "ts": 1_700_000_000.0,
            "node": "n1",
            "source": "vllm",
            "interval_s": 15.0,
            "labels": {"model_name": "m"},
            "samples": [{"kind": "gauge", "name": "vllm:num_requests_running", "labels": {}, "value": 3.0}],
        }
    )


def test_sections_name_the_timed_parts_and_gc_and_are_undone(tmp_path):
    encode, pipeline = tailhound.streams.model_forward.encode, tailhound.streams.evaluator.PIPELINE
    profile = Profile(tmp_path, "run")
    profile.start()
    assert tailhound.streams.model_forward.encode is not encode
    tailhound.streams.model_forward.encode(_engine_snapshot())
    gc.collect()
    profile.stop(1)
    report = profile.path.read_text()
    assert "model-topic forward: encode" in report
    assert "garbage collection, generation 2" in report
    assert "rest: Faust, Kafka client, event loop, agent code" in report
    assert tailhound.streams.model_forward.encode is encode
    assert tailhound.streams.evaluator.PIPELINE is pipeline


def test_cprofile_lists_functions_by_own_time_and_with_callees(tmp_path):
    profile = Profile(tmp_path, "run", "cprofile")
    profile.start()
    tailhound.streams.model_forward.encode(_engine_snapshot())
    profile.stop(1)
    report = profile.path.read_text()
    assert report.startswith("# cProfile, 1 snapshots")
    assert "## by own time" in report and "## by with callees" in report
    assert "model_forward.py" in report
    assert profile.path.with_suffix(".pstat").exists()
