"""Node agents: what runs on GPU nodes and vantage points and publishes snapshots to Kafka.

- :mod:`tailhound.agents.publisher` sends one message per snapshot (key = node) with aiokafka.
- :mod:`tailhound.agents.simulator` is a deterministic fleet simulator used by the demo, scenario tests and
  benchmarks.
"""
