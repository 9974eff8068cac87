"""Issue 28's YAML and server attacks, measured (BENCHMARKS.md, "Hostile input: YAML files and HTTP servers"):
time and Python memory to refuse each YAML attack, event-loop lag of a rule reload of a file at the limits
(on a thread vs on the loop), a good sender beside 8 drippers, 2,000 half-open connections, and the RSS of a
federation pull of a brotli bomb. Run: python bench/hostile_yaml_servers.py (about a minute)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailhound.errors import ConfigFileError
from tailhound.http_guard import ServerLimits
from tailhound.notifier.config import parse_config
from tailhound.streams.reload import RuleReloader
from tailhound.streams.ruleset.rulefile import load_rules, parse_rule_text
from tests.hostile.slow_clients import closed_by_server, connect, drip
from tests.hostile.test_servers_federation_bombs import brotli_bomb, pull
from tests.hostile.test_servers_slow_clients import good_sends, ingest_server
from tests.hostile.yaml_attacks import alias_notifier_file, alias_rule_file, huge, nested_flow


def refuse(what: str, parse) -> None:
    t = time.perf_counter()
    try:
        parse()
        outcome = "accepted"
    except ConfigFileError as exc:
        outcome = exc.detail[:60]
    dt = time.perf_counter() - t
    tracemalloc.start()  # a second run for the memory: tracing slows the parser down severalfold
    with contextlib.suppress(ConfigFileError):
        parse()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"| {what} | {dt * 1000:.1f} ms | {peak / 2**20:.1f} MiB | {outcome} |")


def big_rule_file(path: Path) -> None:
    """A rule file near the limits: one rule, ~80,000 nodes of labels (about 0.9 MB)."""
    labels = "".join(f"          k{i}: v{i}\n" for i in range(40_000))
    path.write_text(
        "groups:\n  - name: t\n    rules:\n      - name: hot\n        scope: gpu\n"
        "        when: {signal: gpu.temperature, above: 85}\n        severity: critical\n"
        "        root_cause: gpu-thermal-throttle\n        labels:\n" + labels
    )


async def lag_during(coro_factory) -> tuple[float, float]:
    """(max event-loop lag in ms while `coro_factory()` runs, its wall time in s)."""
    worst, done = 0.0, False

    async def ticker():
        nonlocal worst
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - t - 0.01)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)  # the ticker is running
    t0 = time.perf_counter()
    await coro_factory()
    wall = time.perf_counter() - t0
    done = True
    await tick
    return worst * 1000, wall


async def servers() -> None:
    server = await ingest_server(ServerLimits(body_timeout_s=5))
    try:
        drippers = [
            asyncio.create_task(drip(server.port, "127.0.0.2", "/api/v1/write", interval_s=1.0, max_bytes=20))
            for _ in range(8)
        ]
        await asyncio.sleep(0.5)
        good = await good_sends(server.port, 28)
        t = time.perf_counter()
        answers = await asyncio.gather(*drippers)
        print(
            f"- 8 drippers at 1 B/s, max_concurrent_requests 8, body_timeout_s 5: good sender "
            f"{good.count(204)}/28 answered 204; drippers answered 408: "
            f"{sum(bool(a) and a.startswith(b'HTTP/1.1 408') for a in answers)}/8, "
            f"{time.perf_counter() - t + 0.5:.1f} s after connecting"
        )
    finally:
        await server.stop()
    server = await ingest_server(ServerLimits())  # the defaults: 10 s headers, 64 per client
    try:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        conns = [await connect(server.port, "127.0.0.3") for _ in range(2000)]
        opened = time.perf_counter() - t
        await asyncio.sleep(1)
        after_1s = dict(server.site.counter.open)
        closed = await asyncio.gather(*(closed_by_server(r, timeout_s=30) for r, _ in conns))
        t_all = time.perf_counter() - t
        good = await good_sends(server.port, 5)
        for _, w in conns:
            w.close()
        print(
            f"- 2,000 half-open connections from one address (defaults): {opened:.1f} s to open; "
            f"held after 1 s: {sum(after_1s.values())} (the rest refused at once: {server.site.counter.refused}); "
            f"all closed by the server after {t_all:.1f} s ({sum(c is not None for c in closed)}/2000); "
            f"good sender {good.count(204)}/5; max RSS {rss0 // 1024} -> "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB"
        )
    finally:
        await server.stop()


async def reload_lag(tmp: Path) -> None:
    (tmp / "t.yaml").write_text(
        "groups:\n  - name: t\n    rules:\n      - name: hot\n        scope: gpu\n"
        "        when: {signal: gpu.temperature, above: 85}\n        severity: critical\n"
        "        root_cause: gpu-thermal-throttle\n"
    )
    reloader = RuleReloader(tmp, load_rules(tmp), [].append)
    big_rule_file(tmp / "t.yaml")
    print(f"- a rule file of {(tmp / 't.yaml').stat().st_size / 1e6:.1f} MB (~80k nodes, under every limit):")

    results = []

    async def on_loop():
        results.append(reloader.reload("bench"))

    async def off_loop():
        results.append(await reloader.reload_async("bench"))

    for name, f in (("on the loop (reload, as before)", on_loop), ("on a thread (reload_async)", off_loop)):
        lag, wall = await lag_during(f)
        r = results[-1]
        print(
            f"  - reloaded {name}: {wall:.2f} s, max event-loop lag {lag:.0f} ms "
            f"({'swapped in' if r.ok else 'rejected: ' + r.problems[0][-70:]})"
        )


def main() -> None:
    print("| attack | time to refuse | Python memory peak | outcome |\n|---|---:|---:|---|")
    rule, notifier = alias_rule_file(), alias_notifier_file()
    refuse(f"rule file of {len(rule)} bytes, aliases -> 531,441 conditions", lambda: parse_rule_text(rule, "r"))
    refuse(f"notifier.yaml of {len(notifier)} bytes, aliases -> 531,441 routes", lambda: parse_config(notifier))
    refuse("rule file nested 5,000 deep", lambda: parse_rule_text(f"groups: {nested_flow(5000)}\n", "r"))
    with tempfile.TemporaryDirectory() as d:
        big = huge(Path(d) / "big.yaml", 30)
        refuse("30 MB rule file", lambda: load_rules(big))
        (Path(d) / "rules").mkdir()
        asyncio.run(reload_lag(Path(d) / "rules"))
    asyncio.run(servers())
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    bomb = brotli_bomb(4096)
    t = time.perf_counter()
    _, rejects, peak = asyncio.run(pull(bomb, "br"))
    print(
        f"- federation pull of a {len(bomb):,}-byte brotli body (4 GiB decoded), max_body_bytes 64 MiB: "
        f"{time.perf_counter() - t:.1f} s, Python peak {peak / 2**20:.0f} MiB, max RSS {rss0 // 1024} -> "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB; reject: {rejects[0].reason[-60:]}"
    )


if __name__ == "__main__":
    main()
