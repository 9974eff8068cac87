"""`tailhound record` against the real node_exporter: every record holds the whole body (the issue's 60 s
recording had 5 of 13 bodies cut and no failure counted)."""

from __future__ import annotations

import os
import subprocess
import sys

from tailhound.recording import read_records
from tests.exporters import running, start_node_exporter
from tests.exporters_real.drill import LONG, SecondClient, complete, families

RECORD_S = 60 if LONG else 10


def test_record_from_node_exporter_keeps_every_body_whole(tmp_path):
    with running(start_node_exporter(tmp_path / "node")) as ne:
        url = f"{ne.url}/metrics"
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(f"node: rec-node\nlisten: null\nscrape:\n  - {{job: node, url: '{url}', interval_s: 1}}\n")
        out = tmp_path / "node.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
        with SecondClient([url]) as second:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tailhound",
                    "record",
                    "--config",
                    str(cfg),
                    "--out",
                    str(out),
                    "--duration",
                    str(RECORD_S),
                ],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=RECORD_S + 60,
            )
    assert proc.returncode == 0, proc.stderr
    records = list(read_records(out))
    assert len(records) >= RECORD_S - 2 and f"wrote {len(records)} records" in proc.stdout
    assert not [r.error for r in records if r.error]
    seen = {families(b) for b in second.bodies[url]}
    cut = [i for i, r in enumerate(records) if not complete(r.body) or families(r.body) not in seen]
    assert not cut, f"{len(cut)} of {len(records)} bodies cut"
