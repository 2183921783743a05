"""The consolidate function's entry: the hourly schedule, and domain events from Sigil's bus.

Both arrive as EventBridge events (infra/constructs/consolidation.py routes them here). This
function records what it was asked to do (a log line, a metric, and a typed result) and does no
memory work yet: summarising a session's rolled-out batch and the hourly housekeeping arrive with
the consolidation issue. Until then the rolled-out messages stay in Tier 1 and the index, so a
CompactionDue handled here loses nothing; the hourly run exists to catch up on exactly such
batches.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, model_validator

from shared.adapters.aws.events import SOURCE
from shared.models import DomainEvent
from shared.observability import logger, metrics, tracer

SCHEDULE_SOURCE = "aws.events"
SCHEDULE_DETAIL_TYPE = "Scheduled Event"
METRICS = {
    "schedule": "ScheduleTicks",
    "CompactionDue": "CompactionRequests",
    "MaintenanceDue": "MaintenanceRequests",
}


class ScheduleDetail(BaseModel):
    """A scheduled rule's detail is `{}`; anything in it means the event is not a schedule tick."""

    model_config = ConfigDict(extra="forbid")


class ConsolidateEvent(EventBridgeModel):
    # A domain event as shared.adapters.aws.events publishes it, or the schedule's empty detail.
    detail: DomainEvent | ScheduleDetail

    @model_validator(mode="after")
    def _source_matches_detail(self) -> Self:
        if isinstance(self.detail, DomainEvent):
            # The publisher sets the detail-type to the event's type; a mismatch is not ours.
            if self.source != SOURCE or self.detail_type != self.detail.type:
                raise ValueError(f"a domain event must come from {SOURCE!r} with its type as detail-type")
        elif self.source != SCHEDULE_SOURCE or self.detail_type != SCHEDULE_DETAIL_TYPE:
            raise ValueError(f"unexpected event: source {self.source!r}, detail-type {self.detail_type!r}")
        return self


class Received(BaseModel):
    """What this invocation was asked to do; the function's result, as Lambda records it."""

    trigger: Literal["schedule", "CompactionDue", "MaintenanceDue"]
    event_id: str
    workspace_id: str | None = None
    session_id: str | None = None
    detail: dict[str, Any] = {}


def receive(event: ConsolidateEvent) -> Received:
    if isinstance(event.detail, DomainEvent):
        domain = event.detail
        return Received(
            trigger=domain.type,
            event_id=event.id,
            workspace_id=domain.workspace_id,
            session_id=domain.session_id,
            detail=domain.detail,
        )
    return Received(trigger="schedule", event_id=event.id)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    received = receive(parse(event=event, model=ConsolidateEvent))
    metrics.add_metric(name=METRICS[received.trigger], unit=MetricUnit.Count, value=1)
    # The detail holds sequence numbers only (shared.agent.turn._announce_compaction), no text.
    logger.info("consolidation requested", extra=received.model_dump(mode="json"))
    return received.model_dump(mode="json")
