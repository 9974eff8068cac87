"""Telemetry from a Prometheus that already runs: its remote-write requests become tailhound snapshots.

Teams that already scrape vLLM, dcgm-exporter, node_exporter and blackbox_exporter with Prometheus can point
a ``remote_write`` at tailhound instead of deploying agents. This package is the pure core of that path
(no sockets, no Kafka):

- :mod:`tailhound.ingest.remote_write`: the remote-write 1.0 wire format: snappy (block format) around a
  protobuf ``prometheus.WriteRequest``, decoded by a small hand-written protobuf reader within explicit
  bounds (:class:`~tailhound.ingest.remote_write.DecodeLimits`); it re-exports the two modules beside it:
  :mod:`tailhound.ingest.remote_write_messages` (the request's types ``Series``, ``Metadata``,
  ``WriteRequest``, the stale marker, the limits and ``RemoteWriteError``) and
  :mod:`tailhound.ingest.remote_write_encode` (encoded back, and a scrape as Prometheus sends it: tests,
  federation).
- :mod:`tailhound.ingest.grouping`: samples -> one group per scrape: (node, source, target labels,
  timestamp); each group becomes a record holding the families the agent's parser would read from the same
  page (:mod:`tailhound.ingest.scrape_families`), so that the agent's
  :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` computes deltas, resets and histograms exactly as it
  does for the agent. Memory is bounded (open groups, pending samples,
  sources remembered). It re-exports the two modules beside it: :mod:`tailhound.ingest.series_labels`
  (``GroupingConfig``; a series' labels -> its node, taken from a configurable label, its source, from
  ``job``, and its common labels) and :mod:`tailhound.ingest.exposition_render` (a group's samples -> the
  exposition text of the record, a ``# TYPE`` per family, written when asked for).
- :mod:`tailhound.ingest.receiver`: :class:`~tailhound.ingest.receiver.RemoteWriteIngest`, one request in,
  an HTTP status (204, 400/413/415 for a payload Prometheus must not resend, 401, 503/429 with Retry-After
  when the publisher is behind), the snapshots to publish and the rejects to dead-letter out.

The HTTP server, the Kafka publisher, the worker/CLI wiring and federation pull are built on top of it.
"""

if __name__ != "tailhound.ingest":  # the folder is mapped into the namespace (pyproject.toml, package-dir)
    raise ImportError(f"import tailhound.ingest, not {__name__}: this folder is the tailhound.ingest package")
