"""The example remediation receiver's replay cache refuses new keys when full, instead of forgetting one."""

from __future__ import annotations

import re
import time

import httpx

from tailhound.notifier.receivers.webhook import build_payload, encode_body
from tests.deploy.test_remediation_receiver import (  # noqa: F401 - kube, token_file: fixtures
    capacity,
    env_for,
    kube,
    post_raw,
    serve_remediation,
    token_file,
)


def test_a_replay_past_max_keys_within_the_window_is_refused(kube, token_file):  # noqa: F811
    env = env_for(kube, token_file, DEDUP_MAX_KEYS="3", REPLAY_CACHE_FILE="")
    sent = [capacity(incident_id=f"inc-{i:016d}") for i in range(4)]
    bodies = [(encode_body(build_payload(n)), n.idempotency_key) for n in sent]
    ts = int(time.time())
    with serve_remediation(env) as url:
        for body, key in bodies[:3]:
            assert post_raw(url, body, ts=ts, key=key).status_code == 200
        full = post_raw(url, bodies[3][0], ts=ts, key=bodies[3][1])
        assert full.status_code == 503 and "replay cache full" in full.json()["error"]
        assert 250 <= int(full.headers["Retry-After"]) <= 301  # when the first key leaves its window
        replay = post_raw(url, bodies[0][0], ts=ts, key=bodies[0][1])  # the attack: the first request again
        assert replay.status_code == 409
        metrics = httpx.get(url.rsplit("/", 2)[0] + "/metrics", timeout=5).text
    assert len(kube.patches) == 3  # one scale-out per key, none for the refused or the replayed one
    assert re.search(r'refused_total\{reason="replay_cache_full"\} 1$', metrics, re.M), metrics
    assert "tailhound_remediation_replay_cache_keys 3" in metrics
