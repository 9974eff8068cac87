"""What a load test runs: the ramp's steps, its settings and bounds, and the plan handed to the load driver."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tailhound.capacity.load_target import Target
from tailhound.capacity.token_mix import TokenMix
from tailhound.errors import TailhoundError

MIN_STEP_S = 2.0


def plan_loads(mode: str, steps: int, peak: float | None = None, target_load: float | None = None) -> list[float]:
    """The offered load of each step: ``target / steps`` up to ``target`` (default 1.5 x `peak`)."""
    if steps < 1:
        raise TailhoundError("--steps must be at least 1")
    top = target_load if target_load is not None else (1.5 * peak if peak is not None else None)
    if top is None:
        raise TailhoundError(
            "give the load to reach: --peak X (the ramp goes to 1.5 x X), --target-load X, or "
            "--from-recording FILE (its peak)"
        )
    if not math.isfinite(top) or top <= 0:
        raise TailhoundError(f"the top load must be > 0, got {top:g}")
    loads = [top * (i + 1) / steps for i in range(steps)]
    if mode == "concurrency":
        return [float(max(1, round(x))) for x in loads]
    return [round(x, 6) for x in loads]


@dataclass
class LoadTestConfig:
    target: Target
    mix: TokenMix
    loads: list[float]
    model: str | None = None
    api: Literal["chat", "completions"] = "chat"
    mode: Literal["rate", "concurrency"] = "rate"
    step_s: float = 60.0
    max_duration_s: float = 1800.0
    max_requests: int = 100_000
    max_error_rate: float = 0.5
    arrivals: Literal["poisson", "constant"] = "poisson"
    max_concurrency: int = 512
    request_timeout_s: float = 120.0
    #: seconds the requests still running after the last step may take to end (then they are cut and counted
    #: as the step's unfinished); None: one step. A saturated engine's queue would otherwise stretch the test
    drain_s: float | None = None
    ignore_eos: bool = True
    seed: int = 0
    #: the engine's /metrics: None -> the target's /metrics when it answers
    metrics: Target | None = None
    scrape_metrics: bool = True
    api_key: str | None = field(default=None, repr=False)

    def check(self) -> None:
        if self.step_s < MIN_STEP_S:
            raise TailhoundError(f"--step-s must be at least {MIN_STEP_S:g} s (percentiles need requests)")
        if not self.loads:
            raise TailhoundError("no load steps")
        for name, low in (("max_duration_s", 1.0), ("request_timeout_s", 0.1)):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= low):
                raise TailhoundError(f"{name} must be >= {low:g}")
        if self.max_requests < 1 or self.max_concurrency < 1:
            raise TailhoundError("--max-requests and --max-concurrency must be at least 1")
        if not 0 < self.max_error_rate <= 1:
            raise TailhoundError("--max-error-rate must be in (0, 1]")


def driver_plan(cfg: LoadTestConfig, model: str) -> dict:
    """What the driver process gets (JSON on its command line): no credentials."""
    return {
        "base": cfg.target.origin,
        "path": cfg.target.api_path(cfg.api),
        "api": cfg.api,
        "model": model,
        "mode": cfg.mode,
        "loads": cfg.loads,
        "step_s": cfg.step_s,
        "max_duration_s": cfg.max_duration_s,
        "max_requests": cfg.max_requests,
        "max_error_rate": cfg.max_error_rate,
        "arrivals": cfg.arrivals,
        "max_concurrency": cfg.max_concurrency,
        "request_timeout_s": cfg.request_timeout_s,
        "drain_s": cfg.step_s if cfg.drain_s is None else cfg.drain_s,
        "ignore_eos": cfg.ignore_eos,
        "seed": cfg.seed,
        "token_mix": cfg.mix.to_dict(),
    }
