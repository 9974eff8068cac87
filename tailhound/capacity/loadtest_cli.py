"""The ``tailhound loadtest`` command: ``register(app)`` adds it to a typer app."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tailhound.errors import TailhoundError
from tailhound.output import make_console
from tailhound.progress import ProgressReporter

console = make_console()  # piped: the summary table whole, not cut at 80 columns
err_console = make_console(stderr=True)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _unit(mode: str) -> str:
    return "req/s" if mode == "rate" else "in flight"


class _Printer:
    """Progress for people: one line per step as it ends, and the ramp's progress on stderr (a bar over the
    planned seconds on a terminal, a line every 10 s otherwise: tailhound.progress)."""

    def __init__(self, mode: str, steps: int = 1, step_s: float = 1.0, enabled: bool = True) -> None:
        self.mode, self.step_s = mode, step_s
        self.bar = ProgressReporter("load test", unit="s", total=steps * step_s, enabled=enabled)
        self.bar.update(0, detail="starting the load driver (locust) ...")

    def __call__(self, kind: str, data: dict) -> None:
        if kind == "note":
            err_console.print(f"[yellow]note:[/] {data['text']}", highlight=False)
        elif kind == "ready":
            self.bar.update(0, detail=f"{data.get('users')} users ready")
        elif kind == "step":
            self.bar.update(
                data["index"] * self.step_s,
                detail=f"step {data['index'] + 1}/{data['of']}: {data['offered']:g} {_unit(self.mode)}",
            )
        elif kind == "tick":
            eng = data.get("engine") or {}
            queue = f"  queue {eng['queue']:g}" if "queue" in eng else ""
            self.bar.update(
                data["index"] * self.step_s + min(data["elapsed"], self.step_s),
                detail=f"step {data['index'] + 1}: {data['offered']:g} {_unit(self.mode)}, {data['elapsed']:.0f} s: "
                f"{data['done']} done, {data['errors']} errors, TTFT p50 {_ms(data['ttft'].p50)} ms{queue}",
            )
        elif kind == "step_end" and (st := data["step"]) is not None:
            eng = st.engine
            engine = "".join(f"  {k} {eng[k]:.2f}" for k in ("queue", "batch", "kv_cache_usage") if k in eng)
            flags = ""
            if data.get("late"):
                flags += f"  [yellow]{data['late']} arrivals late (no free user: raise --max-concurrency)[/]"
            if data.get("missed"):
                flags += f"  [red]{data['missed']} arrivals dropped[/]"
            console.print(
                f"step {st.index + 1}/{data['of']}  offered {st.offered:.4g} {_unit(self.mode)}  sent {data['started']}"
                f"  done {st.requests} ({st.throughput_rps:.2f}/s)  errors {st.errors}  "
                f"TTFT p50/p95 {_ms(st.ttft.p50)}/{_ms(st.ttft.p95)} ms  "
                f"TPOT p50/p95 {_ms(st.tpot.p50)}/{_ms(st.tpot.p95)} ms{engine}{flags}",
                highlight=False,
            )
        elif kind == "done":
            self.close()

    def close(self) -> None:
        self.bar.close()


def _summary(result, errors: dict[str, int]) -> Table:  # a LoadTestResult
    unit = "req/s" if result.mode == "rate" else "conc."
    table = Table(title=f"{result.model} @ {result.target} ({result.mode}; TTFT/TPOT in ms)", padding=(0, 1))
    for col in (unit, "done/s", "err", "conc", "TTFT50", "TTFT95", "TPOT50", "TPOT95", "queue", "batch", "KV"):
        table.add_column(col, justify="right")
    for st in result.steps:
        eng = st.engine
        table.add_row(
            f"{st.offered:.4g}",
            f"{st.throughput_rps:.2f}",
            str(st.errors),
            f"{st.concurrency_mean:.1f}" if st.concurrency_mean is not None else "-",
            _ms(st.ttft.p50),
            _ms(st.ttft.p95),
            _ms(st.tpot.p50),
            _ms(st.tpot.p95),
            *(f"{eng[k]:.2f}" if k in eng else "-" for k in ("queue", "batch", "kv_cache_usage")),
        )
    return table


def loadtest(
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="The OpenAI-compatible endpoint to load, e.g. http://127.0.0.1:8000/v1 (required: "
            "there is no default). Hosts other than loopback need --allow-host.",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the result (JSON).")] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", help="A host (other than loopback) that may be load-tested (repeatable)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model to request (default: the first of /v1/models).")] = None,
    api: Annotated[str, typer.Option(help="chat (/v1/chat/completions) or completions (/v1/completions).")] = "chat",
    mode: Annotated[
        str,
        typer.Option(
            help="rate: open-loop arrivals at the step's request rate; concurrency: the step's requests in "
            "flight, each user in a closed loop."
        ),
    ] = "rate",
    peak: Annotated[
        float | None,
        typer.Option(
            help="The peak load (req/s, or requests in flight with --mode concurrency); the ramp goes to 1.5 x it."
        ),
    ] = None,
    from_recording: Annotated[
        Path | None,
        typer.Option(
            "--from-recording",
            help="A scrape recording of the engine: its token mix, and its peak (busiest engine) "
            "when --peak is not given.",
        ),
    ] = None,
    target_load: Annotated[
        float | None, typer.Option("--target-load", help="The last step's load (default 1.5 x the peak).")
    ] = None,
    steps: Annotated[int, typer.Option(min=1, max=200, help="Steps from target/steps up to the target.")] = 10,
    step_s: Annotated[float, typer.Option("--step-s", min=2.0, help="Seconds each step is held.")] = 60.0,
    max_duration: Annotated[
        float,
        typer.Option(
            "--max-duration", min=1.0, help="Stop after this many seconds in all (the requests in flight finish)."
        ),
    ] = 1800.0,
    max_requests: Annotated[int, typer.Option("--max-requests", min=1, help="Stop after sending this many.")] = 100_000,
    max_error_rate: Annotated[
        float,
        typer.Option(
            "--max-error-rate", min=0.01, max=1.0, help="Stop when more than this share of a step's requests fail."
        ),
    ] = 0.5,
    prompt_tokens: Annotated[
        float | None, typer.Option("--prompt-tokens", help="Prompt length (tokens; overrides the recording's mix).")
    ] = None,
    output_tokens: Annotated[
        float | None, typer.Option("--output-tokens", help="Output length (max_tokens; overrides the recording's mix).")
    ] = None,
    prompt_spread: Annotated[
        float, typer.Option("--prompt-spread", min=0, help="Prompt lengths uniform in tokens +- this.")
    ] = 0.0,
    output_spread: Annotated[
        float, typer.Option("--output-spread", min=0, help="Output lengths uniform in tokens +- this.")
    ] = 0.0,
    arrivals: Annotated[str, typer.Option(help="Rate mode arrivals: poisson or constant.")] = "poisson",
    max_concurrency: Annotated[
        int,
        typer.Option("--max-concurrency", min=1, max=10_000, help="Rate mode: most requests in flight (locust users)."),
    ] = 512,
    request_timeout: Annotated[
        float, typer.Option("--request-timeout", min=0.5, help="Seconds a request may take (and wait between chunks).")
    ] = 120.0,
    drain: Annotated[
        float | None,
        typer.Option(
            "--drain",
            min=0,
            help="Seconds the requests still running after the last step may take to end; the rest "
            "are cut and counted as unfinished (default: one step).",
        ),
    ] = None,
    ignore_eos: Annotated[
        bool,
        typer.Option("--ignore-eos/--no-ignore-eos", help="Send ignore_eos (vLLM) so outputs have the sampled length."),
    ] = True,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", help="The engine's /metrics URL (default: the target's /metrics when it answers)."),
    ] = None,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not scrape the engine.")] = False,
    api_key_file: Annotated[
        Path | None,
        typer.Option("--api-key-file", help="A file holding the API key (else $TAILHOUND_LOADTEST_API_KEY)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the token lengths and the arrivals.")] = 0,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")] = True,
) -> None:
    """Ramp the load on an inference endpoint in steps (locust) and measure TTFT, TPOT, throughput and the
    engine's queue at each: the input of `tailhound capacity`."""
    from tailhound.capacity.load_plan import LoadTestConfig, plan_loads
    from tailhound.capacity.load_target import API_KEY_ENV, check_target
    from tailhound.capacity.loadtest import run_loadtest
    from tailhound.capacity.token_mix import TokenMix, profile_from_recording

    allowed = list(allow_host or [])
    checked = check_target(target, allowed)
    if out is None:
        raise TailhoundError("--out FILE is required: where the result (JSON) goes")
    if api not in ("chat", "completions"):
        raise TailhoundError(f"--api {api}: use chat or completions")
    if mode not in ("rate", "concurrency"):
        raise TailhoundError(f"--mode {mode}: use rate or concurrency")
    if arrivals not in ("poisson", "constant"):
        raise TailhoundError(f"--arrivals {arrivals}: use poisson or constant")
    metrics_target = check_target(metrics, allowed, option="--metrics") if metrics else None

    mix, recorded_peak = None, None
    if from_recording is not None:
        profile = profile_from_recording(from_recording)
        mix = profile.mix
        recorded_peak = profile.peak_rps if mode == "rate" else profile.peak_concurrency
        err_console.print(
            f"{from_recording}: {profile.engines} engine source(s) over {profile.span_s:.0f} s; "
            f"peak {profile.peak_rps if profile.peak_rps is not None else '-'} req/s, "
            f"{profile.peak_concurrency if profile.peak_concurrency is not None else '-'} in flight "
            "(busiest engine)",
            highlight=False,
        )
        if peak is None and target_load is None and recorded_peak is None:
            raise TailhoundError(
                f"{from_recording}: no peak {'request rate' if mode == 'rate' else 'concurrency'} "
                "in it (too few scrapes?): give --peak or --target-load"
            )
    if prompt_tokens is not None or output_tokens is not None:
        if (prompt_tokens is None or output_tokens is None) and mix is None:
            raise TailhoundError("give both --prompt-tokens and --output-tokens (or --from-recording)")
        from tailhound.capacity.token_mix import Lengths

        prompt_side = Lengths.explicit(prompt_tokens, prompt_spread) if prompt_tokens is not None else mix.prompt
        output_side = Lengths.explicit(output_tokens, output_spread) if output_tokens is not None else mix.output
        both = prompt_tokens is not None and output_tokens is not None
        mix = TokenMix(prompt_side, output_side, source="explicit" if mix is None or both else f"{mix.source}+explicit")
    if mix is None:
        mix = TokenMix.explicit(512, 128)
        err_console.print(
            "[yellow]note:[/] no token mix given: 512 prompt / 128 output tokens; the real "
            "distribution comes with --from-recording",
            highlight=False,
        )
    loads = plan_loads(mode, steps, peak if peak is not None else recorded_peak, target_load)

    api_key = None
    if api_key_file is not None:
        try:
            api_key = api_key_file.read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise TailhoundError(f"--api-key-file {api_key_file}: {exc.strerror}") from None
    api_key = api_key or os.environ.get(API_KEY_ENV) or None

    cfg = LoadTestConfig(
        target=checked,
        mix=mix,
        loads=loads,
        model=model,
        api=api,
        mode=mode,
        step_s=step_s,
        max_duration_s=max_duration,
        max_requests=max_requests,
        max_error_rate=max_error_rate,
        arrivals=arrivals,
        max_concurrency=max_concurrency,
        request_timeout_s=request_timeout,
        drain_s=drain,
        ignore_eos=ignore_eos,
        seed=seed,
        metrics=metrics_target,
        scrape_metrics=not no_metrics,
        api_key=api_key,
    )
    planned = len(loads) * step_s
    summary = mix.summary()
    console.print(
        f"load test of {checked.base}: {len(loads)} steps x {step_s:g} s, {mode} "
        f"{loads[0]:g} .. {loads[-1]:g} {_unit(mode)}; tokens prompt mean {summary.prompt_mean:g} "
        f"(p95 {summary.prompt_p95:g}), output mean {summary.output_mean:g} (p95 {summary.output_p95:g})",
        highlight=False,
    )
    if planned > max_duration:
        err_console.print(
            f"[yellow]note:[/] {planned:g} s of steps, --max-duration {max_duration:g} s: the ramp will be cut short",
            highlight=False,
        )
    printer = _Printer(mode, len(loads), step_s, enabled=progress)
    errors: dict[str, int] = {}

    def progress(kind: str, data: dict) -> None:
        if kind == "done":
            errors.update(data["errors"])
        printer(kind, data)

    try:
        result = asyncio.run(run_loadtest(cfg, progress, out=out))
    finally:
        printer.close()
    console.print(_summary(result, errors))
    if errors:
        console.print("errors: " + ", ".join(f"{n} {why}" for why, n in sorted(errors.items())), highlight=False)
    if unfinished := sum(st.unfinished for st in result.steps):
        waited = drain if drain is not None else step_s
        console.print(
            f"[yellow]unfinished:[/] {unfinished} requests still running {waited:g} s after the last step "
            "were cut (neither errors nor in the percentiles; --drain SECONDS waits longer for them)",
            highlight=False,
        )
    if result.stopped:
        console.print(f"[yellow]stopped early:[/] {result.stopped}", highlight=False)
    console.print(f"wrote {out}", highlight=False)
    if not any(st.requests for st in result.steps):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``loadtest`` to `app` (``tailhound loadtest``)."""
    app.command("loadtest")(loadtest)
