"""`tailhound doctor --target node=URL` against the real node_exporter sees every mapped metric on every run
(it scrapes through the agent's collector: with a body cut at its first chunk it saw 0 in 5 of 6 runs)."""

from __future__ import annotations

from tailhound.catalog import default_catalog
from tailhound.doctor.observed import scrape_targets
from tests.exporters import running, start_node_exporter
from tests.exporters_real.drill import NOT_IN_NODE_EXPORTER_DEFAULTS, catalog_metrics

RUNS = 6


def test_doctor_target_sees_every_mapped_node_metric_every_run(tmp_path):
    catalog = default_catalog()
    expected = len({sm.metric for sm in catalog_metrics("node")} - NOT_IN_NODE_EXPORTER_DEFAULTS)
    with running(start_node_exporter(tmp_path)) as ne:
        mapped = [scrape_targets([f"node={ne.url}/metrics"], 5.0, catalog).mapped("node", catalog) for _ in range(RUNS)]
    assert mapped == [expected] * RUNS
