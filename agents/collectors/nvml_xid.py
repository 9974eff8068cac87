"""XID critical errors for the NVML collector: one event set, each GPU registered on it, drained each collection.

The set is polled with timeout 0, so a collection never waits for an event; at most
:data:`MAX_EVENTS_PER_COLLECT` are read per collection, so a storm of events cannot hold the collector. Each
XID counts on the GPU that raised it (``xid_errors``, ``last_xid``). Without an event set (the driver refused
one) XID errors are not counted, and the rest of the collector works as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tailhound.agents.collectors.nvml_fields import GpuState, handle_key

log = logging.getLogger("tailhound.agent.nvml")

MAX_EVENTS_PER_COLLECT = 4096


def create_event_set(nv: Any) -> Any:
    """A new event set, or None (logged once) when the driver gives none."""
    try:
        return nv.nvmlEventSetCreate()
    except nv.NVMLError as exc:
        log.info("nvml: no event set (%s); XID errors are not counted", exc)
        return None


def drain_xid_events(nv: Any, event_set: Any, by_handle: dict[Any, GpuState], log_once: Callable[..., None]) -> None:
    """Count the XID critical errors waiting on `event_set` on their GPUs (`by_handle`)."""
    if event_set is None:
        return
    for _ in range(MAX_EVENTS_PER_COLLECT):
        try:
            data = nv.nvmlEventSetWait_v2(event_set, 0)
        except nv.NVMLError_Timeout:
            return
        except nv.NVMLError as exc:
            log_once(("event_wait", type(exc)), logging.WARNING, "nvml: nvmlEventSetWait_v2 failed (%s)", exc)
            return
        if not data.eventType & nv.nvmlEventTypeXidCriticalError:
            continue
        gpu = by_handle.get(handle_key(data.device))
        if gpu is not None:
            gpu.xid_errors += 1
            gpu.last_xid = int(data.eventData)
            log.warning("nvml: gpu %d: XID %d", gpu.index, gpu.last_xid)


def free_event_set(nv: Any, event_set: Any) -> None:
    try:
        nv.nvmlEventSetFree(event_set)
    except nv.NVMLError as exc:
        log.debug("nvml: nvmlEventSetFree failed (%s)", exc)
