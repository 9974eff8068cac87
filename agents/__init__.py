"""Node agents: what runs on GPU nodes and vantage points and publishes snapshots to Kafka.

- :mod:`tailhound.agents.publisher` sends one message per snapshot (key = node) with aiokafka.
- :mod:`tailhound.agents.simulator` is a deterministic fleet simulator used by the demo, scenario tests and
  benchmarks.
"""

if __name__ != "tailhound.agents":  # the folder is mapped into the namespace (pyproject.toml, package-dir)
    raise ImportError(f"import tailhound.agents, not {__name__}: this folder is the tailhound.agents package")
