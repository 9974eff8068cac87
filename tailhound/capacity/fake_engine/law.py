"""The fake engine's latency law: a batch of known size, a TPOT that bends at a known concurrency.

Every duration is divided by ``speed``:

- ``max_num_seqs`` batch slots; a request waits in a FIFO queue until one is free, and holds it until its
  last token.
- Tokens: a prompt has one token per whitespace-separated word of its text (chat: of every message's
  content); the output has exactly ``max_tokens`` tokens (default 16, as if ``ignore_eos``), one per
  chunk.
- Prefill: ``prefill(P) = prefill_base_s + prefill_per_token_s * P``; the first token is out when the
  prefill ends, so TTFT = queue wait + prefill(P).
- Decode: each following token takes ``tpot(n) = base_tpot_s * (1 + tpot_slope * max(0, n - knee_concurrency)
  / knee_concurrency)`` where ``n`` is the number of requests holding a slot (running) when it is made:
  flat up to ``knee_concurrency``, then linear. A request holds its slot for
  ``S(P, O, n) = prefill(P) + (O - 1) * tpot(n)``.

Its knees, for a mix of mean prompt P and mean output O (means suffice: S is linear in P and O):

- TPOT bends at ``knee_concurrency`` requests running, reached at the request rate
  :meth:`EngineLaw.knee_rps` = ``knee_concurrency / S(P, O, knee_concurrency)`` (Little's law);
- throughput plateaus at :meth:`EngineLaw.capacity_rps` = ``max_num_seqs / S(P, O, max_num_seqs)``
  requests/s, with every slot taken (concurrency ``max_num_seqs``): above that rate the queue, and TTFT
  with it, grow without bound -- the TTFT knee of a rate ramp.

KV cache usage = tokens held by the running requests (prompt + generated so far) / ``kv_cache_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineLaw:
    """The latency law (see the module docstring); seconds, before ``speed``."""

    max_num_seqs: int = 8
    knee_concurrency: int = 4
    base_tpot_s: float = 0.005
    tpot_slope: float = 0.5
    prefill_base_s: float = 0.001
    prefill_per_token_s: float = 0.00002
    #: KV cache size in tokens (default: 1024 per batch slot)
    kv_cache_tokens: int | None = None
    #: time scale: every duration is divided by this
    speed: float = 1.0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or not 1 <= self.knee_concurrency <= self.max_num_seqs:
            raise ValueError("need 1 <= knee_concurrency <= max_num_seqs")
        for name in ("base_tpot_s", "speed"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be > 0")
        for name in ("tpot_slope", "prefill_base_s", "prefill_per_token_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be >= 0")

    @property
    def kv_tokens(self) -> int:
        return self.kv_cache_tokens or self.max_num_seqs * 1024

    def tpot_s(self, running: int) -> float:
        over = max(0, running - self.knee_concurrency) / self.knee_concurrency
        return self.base_tpot_s * (1.0 + self.tpot_slope * over) / self.speed

    def prefill_s(self, prompt_tokens: float) -> float:
        return (self.prefill_base_s + self.prefill_per_token_s * prompt_tokens) / self.speed

    def service_s(self, prompt_tokens: float, output_tokens: float, running: int) -> float:
        """How long a request holds its batch slot with `running` requests in the batch."""
        return self.prefill_s(prompt_tokens) + max(0.0, output_tokens - 1) * self.tpot_s(running)

    def knee_rps(self, prompt_mean: float, output_mean: float) -> float:
        """The request rate where TPOT starts rising (``knee_concurrency`` requests running)."""
        return self.knee_concurrency / self.service_s(prompt_mean, output_mean, self.knee_concurrency)

    def capacity_rps(self, prompt_mean: float, output_mean: float) -> float:
        """The throughput plateau (every slot busy); above it the queue and TTFT grow without bound."""
        return self.max_num_seqs / self.service_s(prompt_mean, output_mean, self.max_num_seqs)
