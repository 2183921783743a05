"""The consolidate function: the hourly schedule and Sigil's CompactionDue and MaintenanceDue events,
parsed here, run by shared.consolidation.trigger. Its result and logs hold counts and ids, never text."""

from __future__ import annotations

from typing import Any, Self

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, model_validator

from shared import cloud
from shared.adapters.aws.events import SOURCE
from shared.consolidation.deadline import Deadline
from shared.consolidation.trigger import Received, consolidate, publish
from shared.models import DomainEvent
from shared.observability import logger, metrics, tracer

SCHEDULE_SOURCE, SCHEDULE_DETAIL_TYPE = "aws.events", "Scheduled Event"
# Stop this long before Lambda's timeout: time to finish the unit in hand, release leases and log.
MARGIN_S = 60.0


class ScheduleDetail(BaseModel):
    """A scheduled rule's detail is `{}`; anything in it means the event is not a schedule tick."""

    model_config = ConfigDict(extra="forbid")


class ConsolidateEvent(EventBridgeModel):
    detail: DomainEvent | ScheduleDetail

    @model_validator(mode="after")
    def _source_matches_detail(self) -> Self:
        # The publisher sets the detail-type to the event's type; a mismatch is not ours.
        if isinstance(self.detail, DomainEvent):
            if self.source != SOURCE or self.detail_type != self.detail.type:
                raise ValueError(f"a domain event must come from {SOURCE!r} with its type as detail-type")
        elif self.source != SCHEDULE_SOURCE or self.detail_type != SCHEDULE_DETAIL_TYPE:
            raise ValueError(f"unexpected event: source {self.source!r}, detail-type {self.detail_type!r}")
        return self


def receive(event: ConsolidateEvent) -> Received:
    return Received.of(event.id, event.detail if isinstance(event.detail, DomainEvent) else None)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deadline = Deadline.before_timeout(context, MARGIN_S)
    received = receive(parse(event=event, model=ConsolidateEvent))
    publish(received.metrics())
    # The detail holds sequence numbers only (shared.agent.turn._announce_compaction), no text.
    logger.info("consolidation requested", extra=received.model_dump(mode="json"))
    done = consolidate(*cloud.consolidator(), received, deadline=deadline)
    publish(done.metrics())
    return received.model_dump(mode="json") | done.model_dump(mode="json")
