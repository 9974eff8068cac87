"""Node agents: what runs on GPU nodes and vantage points and publishes snapshots to Kafka.

- :mod:`agents.publisher` sends one message per snapshot (key = node) with aiokafka.
- :mod:`agents.simulator` is a deterministic fleet simulator used by the demo, scenario tests and
  benchmarks.
"""
