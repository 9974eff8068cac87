"""The rule pack's version, and where each rule came from (incidents record both).

The version is the git commit when the rules directory is a clean checkout (``git:<12 hex>``), the commit
and a content hash when it has local changes (``git:<commit>+dirty.<12 hex>``), and a content hash
otherwise (``sha256:<12 hex>``: the wheel's packaged rules, a ConfigMap). The content hash covers each
file's name and bytes, so two deployments with the same files report the same version.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 2.0


def content_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:
            h.update(b"<unreadable>")
        h.update(b"\0")
    return h.hexdigest()[:12]


def pack_version(files: list[Path]) -> str:
    if not files:
        return ""
    digest = content_hash(files)
    commit, dirty = _git_state(files[0].parent, files)
    if commit is None:
        return f"sha256:{digest}"
    return f"git:{commit}+dirty.{digest}" if dirty else f"git:{commit}"


def _git_state(directory: Path, files: list[Path]) -> tuple[str | None, bool]:
    """(the checkout's commit, whether the rule files differ from it); (None, False) outside a checkout."""
    git = shutil.which("git")
    if git is None:
        return None, False
    try:
        head = subprocess.run(
            [git, "-C", str(directory), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        if head.returncode != 0:
            return None, False
        paths = [str(f.resolve()) for f in files]
        status = subprocess.run(
            [git, "-C", str(directory), "status", "--porcelain", "--", *paths],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None, False
    return head.stdout.strip() or None, bool(status.stdout.strip()) or status.returncode != 0
