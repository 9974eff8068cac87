"""The notifier's YAML config (``notifier.yaml``): grouping, flap control, delivery policy, the routing
tree, receivers, inhibit rules and declared maintenance windows.

Parsed strictly (``extra="forbid"`` everywhere) by one validator, :func:`check_text`, which the notifier
loads with (:func:`load_config`: every error at its file, line and column) and ``notifier check`` reports
with. Secrets are never in this file: receivers name env variables or files
(:mod:`tailhound.notifier.secrets`). Webhook target hosts must also be on the allow-list in the settings
(``notifier.webhook_allowed_hosts``), so neither a rule file nor this file alone can send incident
data to a new host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from tailhound.config_errors import locate, validation_problem
from tailhound.durations import Duration
from tailhound.errors import ConfigFileError
from tailhound.problems import Problem, at, compose_for_check
from tailhound.yamlfile import file_error, mapping_value, read_config_text

from .config_lint import is_error, lint
from .label_space import LabelSpace
from .limits import MAX_MATCHERS, text_within
from .matchers import MatcherField
from .receiver_names import ReceiverIssue, receiver_issues
from .receivers.console import ConsoleConfig
from .receivers.registry import RECEIVER_TYPES, ReceiverConfig

logger = logging.getLogger(__name__)


class _Strict(BaseModel):
    # an inline secret typed by mistake must not be echoed back in the error
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class Grouping(_Strict):
    """Incidents whose ``by`` labels are equal share one notification (one page).

    The default, one root cause at one place (node, model, endpoint), folds a burst of related
    incidents into one page and keeps a re-fire of the same problem in the same group (so flap control
    sees it; streams gives every re-fire a new incident id). ``by: [incident]`` is one group per
    incident; ``by: [root_cause, model]`` also folds the same cause on several nodes of a model.
    """

    by: list[str] = Field(default_factory=lambda: ["root_cause", "node", "model", "endpoint"], min_length=1)
    #: wait this long after a group's first incident before the first notification (gathers a burst)
    wait: Duration = 30.0
    #: least time between two notifications of one group about new or changed incidents
    interval: Duration = 300.0
    #: re-send a group that is still firing after this long (0: never)
    repeat: Duration = 4 * 3600.0


class FlapControl(_Strict):
    """A group that flips between firing and resolved more than ``max_flips`` times within ``window``
    is marked flapping: one notification says so, then nothing until the flips age out of the window
    (see :mod:`tailhound.notifier.stages.flap`). The defaults page at most once per window: resolve, then a
    re-fire within 20 minutes is flapping, not a second page."""

    window: Duration = 1200.0
    max_flips: int = Field(default=1, ge=1)
    #: a resolve followed by a re-open within this time is one incident, not two flips
    min_flip_interval: Duration = 60.0


class Backoff(_Strict):
    initial: Duration = 1.0
    max: Duration = 300.0
    multiplier: float = Field(default=2.0, ge=1.0)
    #: +-fraction of random jitter on each wait
    jitter: float = Field(default=0.2, ge=0.0, le=1.0)


class Breaker(_Strict):
    """Per receiver: after ``failures`` consecutive failures, stop calling it for ``cooldown``."""

    failures: int = Field(default=5, ge=1)
    cooldown: Duration = 60.0


class Delivery(_Strict):
    """When a notification is given up on and sent to the dead-letter topic: at once for a
    non-retryable error (400, bad token); else after ``max_attempts`` failed attempts (when set) or
    when it is still undelivered ``give_up_after`` its creation. Until then a receiver may be down for
    hours: everything queued for it goes out, in order, once it is back."""

    max_attempts: int | None = Field(default=None, ge=1)
    give_up_after: Duration = 24 * 3600.0
    backoff: Backoff = Field(default_factory=Backoff)
    breaker: Breaker = Field(default_factory=Breaker)


class Route(_Strict):
    """A node of the routing tree (Alertmanager's shape).

    An incident group goes down the tree: the first child whose ``matchers`` all match takes it
    (``continue: true`` lets later siblings match too); a node with no matching child delivers to its
    own ``receiver`` (inherited from its parent when not set).
    """

    receiver: str | None = None
    matchers: list[MatcherField] = Field(default_factory=list)
    continue_: bool = Field(default=False, alias="continue")
    routes: list[Route] = Field(default_factory=list)
    #: Alertmanager's grouping keys, read on the top-level route (as ``grouping:``)
    KEY_ALIASES: ClassVar[tuple[str, ...]] = ("group_by", "group_wait", "group_interval", "repeat_interval")

    @model_validator(mode="before")
    @classmethod
    def _alertmanager_keys(cls, data: object) -> object:
        # Alertmanager's keys that mean something else here are refused with what to write instead; grouping
        # happens before routing, so its keys are only read on the top-level route (NotifierConfig)
        if isinstance(data, dict):
            for key, instead in _REFUSED_ROUTE_KEYS.items():
                if key in data:
                    raise ValueError(f"{key}: {instead}")
            for key in ROUTE_GROUPING_KEYS:  # the top-level route's were moved under grouping: already
                if key in data:
                    raise ValueError(f"{key}: {_PER_ROUTE}")
        return data


#: Alertmanager's top-level route keys -> the ``grouping`` key that means the same here
ROUTE_GROUPING_KEYS = {
    "group_by": "by",
    "group_wait": "wait",
    "group_interval": "interval",
    "repeat_interval": "repeat",
}
_PER_ROUTE = (
    "groups are formed before routing, so grouping is one setting for every route: write it on the "
    "top-level route or under `grouping:`"
)
#: Alertmanager route keys refused on a route, with what to use instead
_REFUSED_ROUTE_KEYS = {
    "match": "deprecated in Alertmanager and not read here: use `matchers: ['label=\"value\"']`",
    "match_re": "deprecated in Alertmanager and not read here: use `matchers: ['label=~\"regex\"']`",
    "mute_time_intervals": "time intervals are not supported: declare a `maintenance:` window (or a silence)",
    "active_time_intervals": "time intervals are not supported: declare a `maintenance:` window (or a silence)",
}


def _grouping_from_route(data: object) -> object:
    """The top-level route's Alertmanager grouping keys (``group_wait: 30s``) moved under ``grouping:``;
    ``group_by: ['...']`` or both spellings of one setting are errors (a child route's: :class:`Route`)."""
    if not isinstance(data, dict) or not isinstance(data.get("route"), dict):
        return data
    route = dict(data["route"])
    taken = {ours: route.pop(theirs) for theirs, ours in ROUTE_GROUPING_KEYS.items() if theirs in route}
    if not taken:
        return data
    grouping = dict(data.get("grouping") or {}) if isinstance(data.get("grouping") or {}, dict) else None
    if grouping is None:
        return data  # the structure check reports the bad `grouping:`
    if taken.get("by") == ["..."] or taken.get("by") == "...":
        raise ValueError(
            "route.group_by: ['...'] (every label) is `grouping.by: [incident]` here: one group per incident"
        )
    for ours, value in taken.items():
        theirs = next(k for k, v in ROUTE_GROUPING_KEYS.items() if v == ours)
        if ours in grouping and grouping[ours] != value:
            raise ValueError(f"route.{theirs} and grouping.{ours} are the same setting: write one of them")
        grouping[ours] = value
    return {**data, "route": route, "grouping": grouping}


class InhibitRule(_Strict):
    """While an incident matching ``source_matchers`` fires, incidents matching ``target_matchers``
    with the same values of the ``equal`` labels are not notified (their cause already is)."""

    source_matchers: list[MatcherField] = Field(min_length=1)
    target_matchers: list[MatcherField] = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)


class MaintenanceWindow(_Strict):
    """A silence declared in git: incidents matching ``matchers`` between ``starts_at`` and ``ends_at``
    are not notified."""

    matchers: list[MatcherField] = Field(min_length=1, max_length=MAX_MATCHERS)
    starts_at: datetime
    ends_at: datetime
    author: Annotated[str, AfterValidator(partial(text_within, what="author"))] = Field(min_length=1)
    comment: Annotated[str, AfterValidator(partial(text_within, what="comment"))] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> MaintenanceWindow:
        if self.starts_at.tzinfo is None or self.ends_at.tzinfo is None:
            raise ValueError("starts_at and ends_at need a time zone (e.g. 2026-12-01T02:00:00Z)")
        if self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        return self


class NotifierConfig(_Strict):
    grouping: Grouping = Field(default_factory=Grouping)
    flap: FlapControl = Field(default_factory=FlapControl)
    delivery: Delivery = Field(default_factory=Delivery)
    route: Route = Field(default_factory=lambda: Route(receiver="console"))
    receivers: list[Annotated[ReceiverConfig, Field(discriminator="type")]] = Field(
        default_factory=lambda: [ConsoleConfig(type="console", name="console")]
    )
    inhibit_rules: list[InhibitRule] = Field(default_factory=list)
    maintenance: list[MaintenanceWindow] = Field(default_factory=list)
    #: links every notification carries (runbook pages per root cause are added by the notifier)
    links: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _alertmanager_grouping(cls, data: object) -> object:
        return _grouping_from_route(data)

    @model_validator(mode="after")
    def _receivers_exist(self) -> NotifierConfig:
        issues = receiver_issues(self.model_dump(mode="json", by_alias=True, exclude_unset=True))
        if issues:
            # its own type, so the checker (which applies the same rules to the raw file) does not say it twice
            raise PydanticCustomError(RECEIVER_ERROR, "{issues}", {"issues": "; ".join(i.message for i in issues)})
        return self

    def receiver(self, name: str) -> ReceiverConfig:
        return next(r for r in self.receivers if r.name == name)


#: the pydantic error type of :func:`~tailhound.notifier.receiver_names.receiver_issues` found by the model
RECEIVER_ERROR = "receiver_names"


# --- the one validator: every problem at its line, for the loader and the check commands ----------------------
@dataclass
class CheckedFile:
    """One config file checked: its problems, and the config when it is valid."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    config: NotifierConfig | None = None
    node: yaml.Node | None = None
    missing: bool = False


def load_config(path: str | Path) -> NotifierConfig:
    """The config in the file at `path`; a :class:`ConfigFileError` holds every error, each at its file, line
    and column (warnings are logged)."""
    p = Path(path)
    return parse_config(read_config_text(p, ConfigFileError), str(p))


def parse_config(text: str, origin: str = "<notifier config>") -> NotifierConfig:
    checked = check_text(text, origin, None)
    errors = [p for p in checked.problems if is_error(p)]
    if errors or checked.config is None:
        raise file_error(origin, errors or checked.problems)
    for p in checked.problems:
        logger.warning("notifier config: %s", p.text())
    return checked.config


def check_text(text: str, origin: str, space: LabelSpace | None) -> CheckedFile:
    """Every problem of one notifier config (sorted by line and column): YAML syntax and duplicate keys, every
    model error, the receiver rules, the warnings; labels are checked against `space` (None: not checked)."""
    node, data, problems, parsed = compose_for_check(text, origin)
    if not parsed:
        return CheckedFile(origin, problems)
    if data is None:
        data, node = {}, None
    if not isinstance(data, dict) or (node is not None and not isinstance(node, yaml.MappingNode)):
        return CheckedFile(
            origin,
            [
                *problems,
                Problem(
                    origin, 1, 1, "a notifier config is a mapping (grouping, route, receivers, inhibit_rules, ...)"
                ),
            ],
        )
    if node is not None:
        problems += lint(origin, text, space, node, data)
        problems += [_receiver_problem(issue, node, origin) for issue in receiver_issues(data)]
    config = None
    try:
        config = NotifierConfig.model_validate(data)
    except ValidationError as exc:
        # the receiver rules were applied to the raw file above, each at its line
        problems += [_validation_problem(err, node, origin) for err in exc.errors() if err["type"] != RECEIVER_ERROR]
    problems.sort(key=lambda p: (p.line or 0, p.column or 0))
    return CheckedFile(origin, problems, config if not any(map(is_error, problems)) else None, node)


def _validation_problem(err: Any, node: yaml.Node | None, origin: str) -> Problem:
    """A model error at its node, through the one formatter; receiver types named as such."""
    problem = validation_problem(err, node, origin, NotifierConfig)
    kind = err["type"]
    if kind == "union_tag_invalid":
        return replace(
            problem,
            message=problem.message.replace("unknown type", "unknown receiver type"),
            hint=problem.hint.replace("types:", "receiver types:"),
        )
    if kind == "union_tag_not_found":
        return replace(problem, hint=f"receiver types: {', '.join(RECEIVER_TYPES)}")
    target, _, _ = locate(node, list(err["loc"]))
    ends = mapping_value(target, "ends_at")
    if problem.message.endswith("ends_at must be after starts_at") and ends is not None:
        return replace(problem, line=ends.start_mark.line + 1, column=ends.start_mark.column + 1)
    return problem


def _receiver_problem(issue: ReceiverIssue, root: yaml.Node, origin: str) -> Problem:
    target, key_node, _ = locate(root, list(issue.loc))
    hint = issue.hint
    if issue.first is not None and (first := locate(root, list(issue.first))[0]) is not None:
        hint = f"first at line {first.start_mark.line + 1}"
    return at(origin, (key_node if issue.at_key else target) or root, issue.message, hint)
