"""Size bounds on JSON sent to a receiver: strings cut, lists capped, the whole document under a byte budget.

A receiver's API refuses an over-long field or an over-large body (PagerDuty: 1024-character summary,
512 KB event); an incident's text comes from telemetry (node and model names, rule summaries), so a
hostile or merely huge group must still produce a request the far side accepts. What is cut is said in
the document (``truncated``) rather than silently dropped.
"""

from __future__ import annotations

import json
from typing import Any

from tailhound.notifier.receivers import truncate


def json_size(doc: Any) -> int:
    """Bytes of `doc` as compact UTF-8 JSON (what the receivers send)."""
    return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode())


def cut_strings(doc: Any, limit: int, max_items: int) -> Any:
    """`doc` with every string cut to `limit` characters and every list and mapping to `max_items` entries."""
    if isinstance(doc, str):
        return truncate(doc, limit)
    if isinstance(doc, list):
        return [cut_strings(v, limit, max_items) for v in doc[:max_items]]
    if isinstance(doc, dict):
        return {truncate(str(k), limit): cut_strings(v, limit, max_items) for k, v in list(doc.items())[:max_items]}
    return doc


def fit(doc: dict[str, Any], budget: int, droppable: list[str]) -> dict[str, Any]:
    """`doc` under `budget` bytes: the keys in `droppable` are removed in order until it fits (each
    removal named in ``truncated``); if it still does not fit, only the short scalars that fit are kept."""
    if json_size(doc) <= budget:
        return doc
    out = dict(doc)
    dropped: list[str] = []
    for key in droppable:
        if key in out:
            del out[key]
            dropped.append(key)
            out["truncated"] = f"over {budget} bytes: {', '.join(dropped)} left out"
            if json_size(out) <= budget:
                return out
    # Nothing droppable left: short scalars, in order, while they fit.
    kept: dict[str, Any] = {"truncated": f"over {budget} bytes: only scalar fields kept"}
    for key, value in out.items():
        short = isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 1024)
        if short and key != "truncated" and json_size({**kept, key: value}) <= budget:
            kept[key] = value
    return kept
