"""The receiver rules of a notifier config, in one place: receiver names are unique, the top-level route has
a receiver (the default for unmatched incidents), and every receiver a route names is defined.

They read the config as plain data (any shape: what is not a mapping or a list is skipped, the structure
check reports it), so the model (:class:`~tailhound.notifier.config.NotifierConfig`) and the validator
(:func:`~tailhound.notifier.config.check_text`, which places each issue at its line) apply the same rules,
and the validator finds these even when other parts of the file do not validate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tailhound.config_errors import nearest

Loc = tuple[str | int, ...]
#: the receiver of the default route (no ``route:``) and the default receiver list
DEFAULT_RECEIVER = "console"


@dataclass(frozen=True)
class ReceiverIssue:
    """One broken receiver rule: at `loc` (a pydantic-style location), at its key when `at_key`."""

    loc: Loc
    message: str
    hint: str = ""
    at_key: bool = False
    #: for a name defined twice: where it was defined first
    first: Loc | None = None


def receiver_issues(data: object) -> list[ReceiverIssue]:
    """Every broken receiver rule of the notifier config `data` (a parsed YAML mapping)."""
    if not isinstance(data, Mapping):
        return []
    out: list[ReceiverIssue] = []
    names = _receiver_names(data, out)
    if "route" not in data:
        if names is not None and DEFAULT_RECEIVER not in names:
            out.append(
                ReceiverIssue(
                    ("receivers",),
                    f"no `route:`: the default route sends everything to receiver {DEFAULT_RECEIVER!r}, "
                    "which is not among the receivers",
                    "add `route: {receiver: <name>}`",
                    at_key=True,
                )
            )
        return out
    route = data["route"]
    if isinstance(route, Mapping):
        if not route.get("receiver"):
            hint = nearest("", names, "receivers") if names else ""
            out.append(
                ReceiverIssue(
                    ("route",),
                    "route: the top-level route needs a receiver (the default for unmatched incidents)",
                    hint,
                    at_key=True,
                )
            )
        _route_receivers(route, ("route",), names, out)
    return out


def _receiver_names(data: Mapping, out: list[ReceiverIssue]) -> list[str] | None:
    """The receiver names, each defined twice noted in `out` (None: the receivers are not a list)."""
    if "receivers" not in data:
        return [DEFAULT_RECEIVER]
    items = data["receivers"]
    if not isinstance(items, list):
        return None
    names: list[str] = []
    first: dict[str, int] = {}
    for i, rc in enumerate(items):
        name = rc.get("name") if isinstance(rc, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in first:
            out.append(
                ReceiverIssue(
                    ("receivers", i, "name"),
                    f"receivers[{i}].name: receiver {name!r} is defined twice",
                    first=("receivers", first[name], "name"),
                )
            )
        else:
            first[name] = i
        names.append(name)
    return names


def _route_receivers(route: Mapping, loc: Loc, names: list[str] | None, out: list[ReceiverIssue]) -> None:
    receiver = route.get("receiver")
    if isinstance(receiver, str) and names is not None and receiver not in names:
        out.append(
            ReceiverIssue(
                (*loc, "receiver"),
                f"{_where(loc)}.receiver: no receiver named {receiver!r}",
                nearest(receiver, names, "receivers"),
            )
        )
    children = route.get("routes")
    for i, child in enumerate(children if isinstance(children, list) else ()):
        if isinstance(child, Mapping):
            _route_receivers(child, (*loc, "routes", i), names, out)


def _where(loc: Loc) -> str:
    """`loc` as people write it: ``route.routes[0]``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
