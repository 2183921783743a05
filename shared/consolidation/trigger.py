"""One consolidation trigger, as the consolidate function receives it, run to its outcome.

The function is started by EventBridge (infra/constructs/consolidation.py routes them to it):

- CompactionDue (the agent publishes one per 50 messages a session rolls out): compact that
  session (runner.run_compaction_due): summaries, facts, the rolling summary.
- MaintenanceDue (an operator's request for one workspace): that workspace's catch-up and
  maintenance (runner.consolidate_workspace).
- the hourly schedule: catch-up and maintenance of every workspace (runner.run_hourly), resuming
  where the previous run stopped.

And by its SQS event source, from the extraction queue:

- TurnCommitted (the agent sends one per committed turn, delayed by the workspace's debounce):
  extract that turn's facts (shared.consolidation.turn_extraction), `extract_turns` for a batch.

A retried event carries the same event id, from which the run id is derived, so a retry writes
what an uninterrupted run would have. A CompactionDue that fails (the model is down) is raised,
for EventBridge to retry; the hourly run catches up whatever is left.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, Self

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shared import serde
from shared.backend import Backend
from shared.consolidation.compaction import CompactionResult
from shared.consolidation.deadline import Deadline
from shared.consolidation.runner import (
    HourlyReport,
    ModelFactory,
    WorkspaceReport,
    compaction_metrics,
    consolidate_workspace,
    run_compaction_due,
    run_hourly,
)
from shared.consolidation.turn_extraction import TurnExtractionResult, extract_turn
from shared.errors import ModelNotConfigured
from shared.metric_catalogue import (
    COMPACTION_REQUESTS,
    MAINTENANCE_REQUESTS,
    SCHEDULE_TICKS,
    TURN_EXTRACTION_REQUESTS,
    record,
)
from shared.models import EVENT_SOURCE, DomainEvent
from shared.observability import metrics

log = logging.getLogger("sigil.consolidation")

Trigger = Literal["schedule", "CompactionDue", "MaintenanceDue"]
TRIGGER_METRICS: Final[Mapping[Trigger, str]] = MappingProxyType(
    {
        "schedule": SCHEDULE_TICKS.name,
        "CompactionDue": COMPACTION_REQUESTS.name,
        "MaintenanceDue": MAINTENANCE_REQUESTS.name,
    }
)


class Received(BaseModel):
    """What this invocation was asked to do."""

    trigger: Trigger
    event_id: str
    workspace_id: str | None = None
    session_id: str | None = None
    detail: dict[str, Any] = {}
    # The domain event itself (None for the schedule); what the run reads, not what it reports.
    event: DomainEvent | None = Field(default=None, exclude=True)

    @property
    def correlation_id(self) -> str | None:
        """The id of the turn that emitted the event (shared.correlation); None for the schedule."""
        return self.event.correlation_id if self.event is not None else None

    @classmethod
    def of(cls, event_id: str, event: DomainEvent | None) -> Received:
        if event is None:
            return cls(trigger="schedule", event_id=event_id)
        return cls(
            trigger=event.type,
            event_id=event_id,
            workspace_id=event.workspace_id,
            session_id=event.session_id,
            detail=event.detail,
            event=event,
        )

    def metrics(self) -> dict[str, float]:
        return {TRIGGER_METRICS[self.trigger]: 1.0}


class Consolidated(BaseModel):
    """What a trigger's run came to (None: a CompactionDue with no session or no model)."""

    outcome: CompactionResult | WorkspaceReport | HourlyReport | None = None

    def metrics(self) -> dict[str, float]:
        """Counts per run, without workspace or session dimensions (those would be unbounded)."""
        if isinstance(self.outcome, CompactionResult):
            return compaction_metrics(self.outcome)
        return self.outcome.metrics() if self.outcome is not None else {}


def consolidate(
    backend: Backend, model: ModelFactory, received: Received, *, deadline: Deadline
) -> Consolidated:
    # The same on every delivery of the event (EventBridge keeps the id when it retries).
    run_id = f"run-{received.event_id}"
    event = received.event
    if event is None:
        return Consolidated(outcome=run_hourly(backend, model, run_id=run_id, deadline=deadline))
    if event.type == "CompactionDue":
        return Consolidated(
            outcome=run_compaction_due(backend, model, event, run_id=run_id, deadline=deadline)
        )
    return Consolidated(
        outcome=consolidate_workspace(backend, model, event.workspace_id, run_id=run_id, deadline=deadline)
    )


def publish(values: Mapping[str, float]) -> None:
    """Add a report's metrics to the invocation's (flushed by the handler's `log_metrics`)."""
    for name, value in values.items():
        # One name per number, and the name says its unit: durations end in "Ms".
        unit = MetricUnit.Milliseconds if name.endswith("Ms") else MetricUnit.Count
        metrics.add_metric(name=name, unit=unit, value=value)


SCHEDULE_SOURCE, SCHEDULE_DETAIL_TYPE = "aws.events", "Scheduled Event"


class ScheduleDetail(BaseModel):
    """A scheduled rule's detail is `{}`; anything in it means the event is not a schedule tick."""

    model_config = ConfigDict(extra="forbid")


class ConsolidateEvent(EventBridgeModel):
    """What EventBridge hands the consolidate function: a Sigil DomainEvent or the schedule's tick."""

    detail: DomainEvent | ScheduleDetail

    @model_validator(mode="after")
    def _source_matches_detail(self) -> Self:
        # The publisher sets the detail-type to the event's type; a mismatch is not ours.
        if isinstance(self.detail, DomainEvent):
            if self.source != EVENT_SOURCE or self.detail_type != self.detail.type:
                raise ValueError(
                    f"a domain event must come from {EVENT_SOURCE!r} with its type as detail-type"
                )
        elif self.source != SCHEDULE_SOURCE or self.detail_type != SCHEDULE_DETAIL_TYPE:
            raise ValueError(f"unexpected event: source {self.source!r}, detail-type {self.detail_type!r}")
        return self


def receive(event: ConsolidateEvent) -> Received:
    return Received.of(event.id, event.detail if isinstance(event.detail, DomainEvent) else None)


# ---------------------------------------------------------------- TurnCommitted, from SQS


class TurnExtractions(BaseModel):
    """What one SQS batch of TurnCommitted came to: each record's run, and those to retry."""

    results: list[TurnExtractionResult] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)  # message ids, retried by SQS
    dropped: int = 0  # not a TurnCommitted, or no model configured: retrying cannot help

    def response(self) -> dict[str, list[dict[str, str]]]:
        """Lambda's partial batch response: only the failed records come back."""
        return {"batchItemFailures": [{"itemIdentifier": m} for m in self.failed]}


Bind = Callable[[str | None], contextlib.AbstractContextManager[Any]]


def extract_turns(
    backend: Backend, model: ModelFactory, event: SqsModel, *, bind: Bind = lambda _: contextlib.nullcontext()
) -> TurnExtractions:
    """Each record's TurnCommitted extracted, under the correlation id of the turn (`bind`); a
    record whose run raises (the model is down) is failed for SQS to deliver again, and to the
    queue's dead-letter queue at last (compaction extracts those messages when they roll out)."""
    done = TurnExtractions()
    for item in event.Records:
        try:
            domain: DomainEvent = serde.loads(DomainEvent, str(item.body))
        except ValidationError:
            log.error("extraction queue: undecodable message dropped", extra={"message_id": item.messageId})
            done.dropped += 1
            continue
        if domain.type != "TurnCommitted":
            log.error("extraction queue: unexpected event dropped", extra={"type": domain.type})
            done.dropped += 1
            continue
        record(TURN_EXTRACTION_REQUESTS)
        with bind(domain.correlation_id):
            try:
                # The message id is the same on every delivery: a retry writes what the first would have.
                done.results.append(extract_turn(backend, model, domain, run_id=f"run-{item.messageId}"))
            except ModelNotConfigured as exc:
                log.warning("turn extraction skipped: no model", extra={"reason": exc.message})
                done.dropped += 1
            except Exception:
                log.exception(
                    "turn extraction failed",
                    extra={"workspace_id": domain.workspace_id, "session_id": domain.session_id},
                )
                done.failed.append(item.messageId)
    return done
