"""What a receiver is handed and what it hands back.

A :class:`Notification` is one message about one *group* of incidents to one receiver. With the
default grouping a group is one incident; a burst of related incidents (same root cause and node, say)
shares one group and one page. The group's id is the id of the incident that opened it, so it is
stable across worker restarts and serves as PagerDuty's ``dedup_key`` and as the Slack thread key.

Receivers are stateless: whatever they need to find their earlier message again (Slack's channel and
message ``ts``) they return as a :data:`Receipt`, which the notification log stores durably and passes
back on the next send for the same group and receiver.

A notification's incidents never carry their chart data (``IncidentEvent.series``, for the incident
console): it is dropped when the notification is built, so no receiver (Slack, PagerDuty, webhooks) is
sent it and the durable pending notifications do not hold it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.incident import IncidentEvent
from tailhound.vocabulary import highest_severity

NotificationKind = Literal["opened", "updated", "resolved"]

#: Receiver-specific memory of an earlier delivery for the same group (e.g. Slack channel + ts).
Receipt = dict[str, str]


class Notification(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1, description="Id of the incident that opened the group.")
    receiver: str = Field(min_length=1, description="Receiver name from the notifier config.")
    sequence: int = Field(ge=1, description="1 for the first notification of this group to this receiver.")
    kind: NotificationKind
    ts: float = Field(gt=0, description="Wall-clock time the notifier decided to send, unix seconds.")
    incidents: list[IncidentEvent] = Field(
        min_length=1, description="Latest event of every incident in the group; the lead incident first."
    )
    group_labels: dict[str, str] = Field(default_factory=dict, description="The `group_by` values.")
    flapping: bool = Field(default=False, description="The group changed state too often; not re-paged.")
    links: dict[str, str] = Field(default_factory=dict, description="Named URLs: runbook, console, ...")

    @field_validator("incidents")
    @classmethod
    def _without_series(cls, incidents: list[IncidentEvent]) -> list[IncidentEvent]:
        """The incidents without their chart data (the console's, not the receivers')."""
        return [ev.model_copy(update={"series": []}) if ev.series else ev for ev in incidents]

    @property
    def lead(self) -> IncidentEvent:
        return self.incidents[0]

    @property
    def resolved(self) -> bool:
        return self.kind == "resolved"

    @property
    def idempotency_key(self) -> str:
        """Stable per group, receiver and step: a redelivery of the same step carries the same key."""
        return f"{self.group_id}/{self.receiver}/{self.sequence}"

    @property
    def severity(self) -> str:
        """The highest severity among the group's incidents."""
        return highest_severity(i.severity for i in self.incidents)

    @property
    def transient(self) -> bool:
        """Transient only when every incident of the group is."""
        return all(i.transient for i in self.incidents)

    def title(self) -> str:
        """One line: ``[FIRING] gpu-thermal-throttle: <summary> (+2 related)``; where the lead's cause has a
        look-alike the signals cannot rule out, ``[FIRING] retry-storm or capacity?: ...``."""
        state = "RESOLVED" if self.resolved else ("FLAPPING" if self.flapping else "FIRING")
        more = f" (+{len(self.incidents) - 1} related)" if len(self.incidents) > 1 else ""
        lead = self.lead
        summary = lead.summary or lead.scope.describe()
        cause = f"{lead.root_cause} or {lead.runner_up}?" if lead.runner_up else str(lead.root_cause)
        return f"[{state}] {cause}: {summary}{more}"
