"""Capacity planning: load tests that find the TTFT and TPOT knees, and the thresholds they give.

- ``tailhound loadtest`` (:mod:`.loadtest`): drives an OpenAI-compatible endpoint with locust, ramping the
  request rate (or concurrency) in steps, with the token mix of a recording; measures client-side TTFT and
  TPOT and the engine's queue and batch at each step -> a :class:`~.model.LoadTestResult`.
- ``tailhound capacity`` (:mod:`.knees`, :mod:`.recommend`): from a load test or recorded production
  telemetry, the knees, the throughput plateau and where TPOT grows faster than throughput -> a
  :class:`~.model.CapacityFile` that rules read (signals ``capacity.*``), KEDA trigger values, plots.
"""
