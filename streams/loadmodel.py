"""What a window's P95 latency SHOULD be at its load, so "2x baseline" means 2x what this load should cost.

One model per signal (``latency.ttft.p95``, ...) predicts the window's P95 from its load
(:class:`WindowFeatures`): a linear quantile regression on products that follow the cost of serving (prompt
tokens x running requests, context x running, waiting x prompt, running squared). Linear because its state is a
few floats: the artifact is plain, versioned, digest-checked JSON (no pickle), the fit is deterministic, and it
extrapolates overload instead of hiding it as trees do. Fitting (numpy, scikit-learn: the ``fit`` extra) runs
offline; predicting is a dot product in plain Python, so the worker needs neither. :func:`expected_for` uses the
model only inside its training range (plus a margin) and falls back to the rolling baseline otherwise.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tailhound.errors import ConfigError, TailhoundError

from .baseline import RollingBaseline

if TYPE_CHECKING:
    import numpy as np

ARTIFACT_FORMAT = "tailhound-loadmodel"
ARTIFACT_VERSION = 1
BASE_FEATURES = ("prompt_tokens", "gen_tokens", "running", "waiting", "request_rate")
FEATURES = (*BASE_FEATURES, "prompt_tokens*running", "context_tokens*running", "waiting*prompt_tokens", "running^2")
#: L1 penalty relative to the median target (scale-free: the same for TTFT in s and TPOT in ms-range values).
DEFAULT_ALPHA = 1e-3
DEFAULT_HOLDOUT = 0.2
DEFAULT_MARGIN = 0.1
MIN_FLOOR_S = 1e-4
MIN_ROWS = 40
#: what ``tailhound baseline fit`` says when the ``fit`` extra is not installed
FIT_INSTALL_HINT = "pip install 'tailhound[fit]'"


def require_fit_dependencies() -> None:
    """Raise a TailhoundError with the install command when numpy or scikit-learn cannot be imported."""
    try:
        import numpy  # noqa: F401
        import sklearn.linear_model  # noqa: F401
    except ImportError as exc:
        raise TailhoundError(
            f"fitting a load model needs scikit-learn and numpy, the `fit` extra ({exc.name} is "
            f"not installed): {FIT_INSTALL_HINT}"
        ) from None


@dataclass(frozen=True)
class WindowFeatures:
    """The load of one engine over one window (1 or 5 minutes), ``ts`` the window's end (event time)."""

    prompt_tokens: float  # mean prompt tokens per request
    gen_tokens: float  # mean generated tokens per request
    running: float  # mean running requests
    waiting: float  # mean waiting requests
    request_rate: float  # requests per second
    ts: float | None = None

    def engineered(self) -> list[float]:
        p, g, r, w = self.prompt_tokens, self.gen_tokens, self.running, self.waiting
        return [p, g, r, w, self.request_rate, p * r, (p + g) * r, w * p, r * r]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class TrainedOn(_Strict):
    rows: int = Field(ge=1)
    ts_min: float | None = None
    ts_max: float | None = None


class FitQuality(_Strict):
    """Pinball losses on the held-out (newest) rows: the model vs a constant (the training P-quantile)."""

    pinball_loss: float = Field(ge=0)
    baseline_pinball_loss: float = Field(ge=0)
    holdout_rows: int = Field(ge=1)


class LoadModelArtifact(_Strict):
    format: Literal["tailhound-loadmodel"]
    version: Literal[1]
    signal: str = Field(min_length=1)
    quantile: float = Field(gt=0, lt=1)
    features: list[str]
    coef: list[float]
    intercept: float
    floor: float = Field(gt=0)
    feature_ranges: dict[str, tuple[float, float]]
    alpha: float = Field(ge=0)
    sklearn_version: str
    trained_on: TrainedOn
    fit: FitQuality
    digest: str = ""

    @field_validator("features")
    @classmethod
    def _known_features(cls, v: list[str]) -> list[str]:
        if tuple(v) != FEATURES:
            raise ValueError(f"features must be {list(FEATURES)} (this tailhound computes those)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> LoadModelArtifact:
        if len(self.coef) != len(self.features):
            raise ValueError(f"{len(self.coef)} coefficients for {len(self.features)} features")
        if set(self.feature_ranges) != set(BASE_FEATURES):
            raise ValueError(f"feature_ranges must cover exactly {list(BASE_FEATURES)}")
        if any(lo > hi for lo, hi in self.feature_ranges.values()):
            raise ValueError("a feature range has min > max")
        return self

    def content_digest(self) -> str:
        return _digest(self.model_dump(mode="json"))


def _digest(payload: dict) -> str:
    body = {k: v for k, v in payload.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _matrix(rows: Sequence[WindowFeatures]) -> np.ndarray:
    import numpy as np

    return np.array([r.engineered() for r in rows], dtype=np.float64)


def _fit_linear(x: np.ndarray, y: np.ndarray, quantile: float, alpha: float) -> tuple[np.ndarray, float]:
    """Fit on standardised columns (so ``alpha`` means the same for every feature), return raw-scale coefs."""
    import numpy as np
    from sklearn.linear_model import QuantileRegressor

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    penalty = alpha * float(np.median(np.abs(y)))
    reg = QuantileRegressor(quantile=quantile, alpha=penalty, solver="highs", fit_intercept=True)
    reg.fit((x - mean) / scale, y)
    coef = reg.coef_ / scale
    intercept = float(reg.intercept_ - np.dot(coef, mean))
    return coef, intercept


class LoadModel:
    """A fitted load model; build with :meth:`fit` or :meth:`load`."""

    def __init__(self, artifact: LoadModelArtifact) -> None:
        self.artifact = artifact
        self._coef = tuple(artifact.coef)

    @property
    def signal(self) -> str:
        return self.artifact.signal

    @classmethod
    def fit(
        cls,
        rows: Sequence[WindowFeatures],
        targets: Sequence[float],
        quantile: float = 0.95,
        *,
        signal: str = "latency.ttft.p95",
        alpha: float = DEFAULT_ALPHA,
        holdout: float = DEFAULT_HOLDOUT,
    ) -> LoadModel:
        """Fit on all rows; the reported fit quality comes from a fit on the oldest rows scored on the newest.
        numpy and scikit-learn are imported here, not with the module: a worker that only predicts never
        loads them."""
        require_fit_dependencies()
        import numpy as np
        import sklearn
        from sklearn.metrics import mean_pinball_loss

        if len(rows) != len(targets):
            raise ValueError(f"{len(rows)} rows but {len(targets)} targets")
        if len(rows) < MIN_ROWS:
            raise ValueError(f"need at least {MIN_ROWS} windows to fit a load model, got {len(rows)}")
        order = sorted(range(len(rows)), key=lambda i: (rows[i].ts is None, rows[i].ts or 0.0, i))
        x = _matrix([rows[i] for i in order])
        y = np.array([float(targets[i]) for i in order], dtype=np.float64)
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("features and targets must be finite")
        n_test = max(1, int(round(len(y) * holdout)))
        x_train, y_train, x_test, y_test = x[:-n_test], y[:-n_test], x[-n_test:], y[-n_test:]
        coef, intercept = _fit_linear(x_train, y_train, quantile, alpha)
        floor = max(MIN_FLOOR_S, 0.5 * float(y_train.min()))
        held_out = np.maximum(x_test @ coef + intercept, floor)
        constant = np.full_like(y_test, float(np.quantile(y_train, quantile)))
        fit = FitQuality(
            pinball_loss=float(mean_pinball_loss(y_test, held_out, alpha=quantile)),
            baseline_pinball_loss=float(mean_pinball_loss(y_test, constant, alpha=quantile)),
            holdout_rows=n_test,
        )
        coef, intercept = _fit_linear(x, y, quantile, alpha)
        stamps = [r.ts for r in rows if r.ts is not None]
        base = x[:, : len(BASE_FEATURES)]
        artifact = LoadModelArtifact(
            format=ARTIFACT_FORMAT,
            version=ARTIFACT_VERSION,
            signal=signal,
            quantile=quantile,
            features=list(FEATURES),
            coef=[float(c) for c in coef],
            intercept=intercept,
            floor=max(MIN_FLOOR_S, 0.5 * float(y.min())),
            feature_ranges={n: (float(base[:, k].min()), float(base[:, k].max())) for k, n in enumerate(BASE_FEATURES)},
            alpha=alpha,
            sklearn_version=sklearn.__version__,
            trained_on=TrainedOn(rows=len(y), ts_min=min(stamps, default=None), ts_max=max(stamps, default=None)),
            fit=fit,
        )
        return cls(artifact.model_copy(update={"digest": artifact.content_digest()}))

    def predict(self, features: WindowFeatures) -> float:
        """The expected P-quantile (seconds) at this load, never below the artifact's floor."""
        raw = math.fsum(c * f for c, f in zip(self._coef, features.engineered(), strict=True)) + self.artifact.intercept
        return max(raw, self.artifact.floor) if math.isfinite(raw) else self.artifact.floor

    def covers(self, features: WindowFeatures, margin: float = DEFAULT_MARGIN) -> bool:
        """Whether every input lies within its training range, widened by ``margin`` x the range each side."""
        for name, (lo, hi) in self.artifact.feature_ranges.items():
            value = getattr(features, name)
            slack = margin * (hi - lo)
            if not (lo - slack <= value <= hi + slack):
                return False
        return True

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.artifact.model_dump(mode="json"), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> LoadModel:
        try:
            text = Path(path).read_text()
            raw = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read load model artifact: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("format") != ARTIFACT_FORMAT:
            raise ConfigError(f"{path}: not a load model artifact (format must be {ARTIFACT_FORMAT!r})")
        version = raw.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version != ARTIFACT_VERSION:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > ARTIFACT_VERSION
            why = "is newer than this tailhound reads" if newer else "is not supported"
            raise ConfigError(f"{path}: load model artifact version {version!r} {why} (reads {ARTIFACT_VERSION})")
        try:
            artifact = LoadModelArtifact.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:3])
            raise ConfigError(f"{path}: invalid load model artifact: {problems}") from exc
        if raw.get("digest") != _digest(raw):
            raise ConfigError(f"{path}: load model artifact digest mismatch (modified after training)")
        return cls(artifact)


@dataclass(frozen=True)
class ExpectedCost:
    """The expected value of a signal for one window, and which baseline said so."""

    value: float
    source: Literal["load-model", "rolling"]
    floor: float = MIN_FLOOR_S

    @property
    def label(self) -> str:
        return "load model" if self.source == "load-model" else "rolling baseline"

    def ratio(self, observed: float) -> float:
        return observed / max(self.value, self.floor)

    def describe(self, observed: float) -> str:
        """Evidence text, e.g. ``2.3x what this load should cost (load model)``."""
        what = "what this load should cost" if self.source == "load-model" else "the usual level"
        return f"{self.ratio(observed):.1f}x {what} ({self.label})"


def expected_for(
    signal: str,
    features: WindowFeatures | None,
    model: LoadModel | None,
    rolling: RollingBaseline | None,
    margin: float = DEFAULT_MARGIN,
) -> ExpectedCost | None:
    """The load model's prediction when it is for ``signal`` and covers ``features``, else the rolling median."""
    if model is not None and features is not None and model.signal == signal and model.covers(features, margin):
        return ExpectedCost(value=model.predict(features), source="load-model", floor=model.artifact.floor)
    expected = rolling.expected() if rolling is not None else None
    if expected is None:
        return None
    return ExpectedCost(value=expected.median, source="rolling", floor=rolling.median_floor)


def features_of(view: dict[str, dict[str, float]], entity: str, ts: float | None = None) -> WindowFeatures | None:
    """The load of one engine from the node's current view (None while a part is unknown)."""

    def get(signal: str) -> float | None:
        return (view.get(signal) or {}).get(entity)

    prompt, gen = get("tokens.prompt.mean"), get("tokens.generation.mean")
    running, waiting = get("engine.requests_running"), get("engine.requests_waiting")
    rate = get("engine.requests_finished.rate")
    if rate is None:
        rate = get("engine.requests_received.rate")
    if None in (prompt, gen, running, waiting, rate):
        return None
    return WindowFeatures(
        prompt_tokens=prompt,
        gen_tokens=gen,
        running=running,
        waiting=waiting,  # type: ignore[arg-type]
        request_rate=rate,
        ts=ts,
    )  # type: ignore[arg-type]
