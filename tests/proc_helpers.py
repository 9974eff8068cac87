"""Find processes left behind (no orphans allowed)."""

from __future__ import annotations

from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (d / "environ").read_bytes().decode(errors="replace")
            state = (d / "stat").read_text().split()[2]
        except OSError:
            continue
        if state != "Z" and (text in cmd or text in environ):
            pids.append(int(d.name))
    return pids
