"""The consolidate function's entry: the hourly schedule, and domain events from Sigil's bus.

Both arrive as EventBridge events (infra/constructs/consolidation.py routes them here):

- CompactionDue (the agent publishes one per 50 messages a session rolls out): compact that
  session (shared.consolidation.compaction): summaries, facts, the rolling summary.
- MaintenanceDue (an operator's request for one workspace): that workspace's catch-up and
  maintenance (shared.consolidation.runner.consolidate_workspace).
- the hourly schedule: catch-up and maintenance of every workspace (runner.run_hourly), resuming
  where the previous run stopped.

Every run stops MARGIN_S before Lambda's timeout, between units of work, leaving checkpoints for
the next; a retried event carries the same event id, from which the run id is derived, so a retry
writes what an uninterrupted run would have. A CompactionDue that fails (the model is down) is
raised, for EventBridge to retry; the hourly run catches up whatever is left.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, model_validator

from shared import cloud
from shared.adapters.aws.events import SOURCE
from shared.consolidation.compaction import CompactionResult
from shared.consolidation.deadline import Deadline
from shared.consolidation.runner import (
    HourlyReport,
    Totals,
    WorkspaceReport,
    consolidate_workspace,
    run_compaction_due,
    run_hourly,
)
from shared.models import DomainEvent
from shared.observability import logger, metrics, tracer

SCHEDULE_SOURCE = "aws.events"
SCHEDULE_DETAIL_TYPE = "Scheduled Event"
METRICS = {
    "schedule": "ScheduleTicks",
    "CompactionDue": "CompactionRequests",
    "MaintenanceDue": "MaintenanceRequests",
}
# Stop this long before Lambda's timeout: time to finish the unit in hand, release the leases and
# log. The function's timeout is 15 minutes (infra/constructs/consolidation.py).
MARGIN_S = 60.0
DEFAULT_REMAINING_MS = 15 * 60 * 1000


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
    """What this invocation was asked to do."""

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


Outcome = CompactionResult | WorkspaceReport | HourlyReport | None


def deadline_for(context: LambdaContext) -> Deadline:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    millis = remaining() if callable(remaining) else DEFAULT_REMAINING_MS
    return Deadline.after(millis / 1000.0 - MARGIN_S)


def run(event: ConsolidateEvent, received: Received, deadline: Deadline) -> Outcome:
    backend, model = cloud.consolidator()
    # The same on every delivery of the event (EventBridge keeps the id when it retries).
    run_id = f"run-{received.event_id}"
    if isinstance(event.detail, DomainEvent):
        if event.detail.type == "CompactionDue":
            return run_compaction_due(backend, model, event.detail, run_id=run_id, deadline=deadline)
        return consolidate_workspace(
            backend, model, event.detail.workspace_id, run_id=run_id, deadline=deadline
        )
    return run_hourly(backend, model, run_id=run_id, deadline=deadline)


def publish_metrics(outcome: Outcome) -> None:
    """Counts per run, without workspace or session dimensions (those would be unbounded)."""
    totals = Totals()
    maintenance: list[dict[str, Any]] = []
    if isinstance(outcome, CompactionResult):
        totals.add(outcome)
        metrics.add_metric(
            name="CompactionDurationMs", unit=MetricUnit.Milliseconds, value=outcome.duration_ms
        )
    elif isinstance(outcome, WorkspaceReport):
        totals = outcome.totals
        maintenance = [outcome.maintenance] if outcome.maintenance else []
    elif isinstance(outcome, HourlyReport):
        totals = outcome.totals
        maintenance = [w.maintenance for w in outcome.workspaces if w.maintenance]
        metrics.add_metric(name="ConsolidationRunMs", unit=MetricUnit.Milliseconds, value=outcome.duration_ms)
        metrics.add_metric(
            name="ConsolidationPartial",
            unit=MetricUnit.Count,
            value=1.0 if outcome.status == "partial" else 0.0,
        )
    else:
        return
    for name, value in (
        ("SummariesWritten", totals.summaries),
        ("FactsExtracted", totals.facts_extracted),
        ("FactsMerged", totals.facts_merged),
        ("FactsDropped", totals.facts_dropped),
        ("CompactionBusy", totals.busy),
        ("CompactionOverBudget", totals.over_budget),
        ("ConsolidationErrors", totals.errors),
        ("ConsolidationTokensIn", totals.tokens_in),
        ("ConsolidationTokensOut", totals.tokens_out),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    if maintenance:
        for key in (
            "scored",
            "promoted",
            "pruned",
            "capped",
            "merged_exact",
            "merged_near",
            "backfilled",
            "messages_backfilled",
            "summaries_backfilled",
        ):
            total = sum(int(m.get(key, 0)) for m in maintenance)
            metrics.add_metric(name=f"Maintenance_{key}", unit=MetricUnit.Count, value=total)
        ms = sum(float(m.get("duration_s", 0.0)) for m in maintenance) * 1000.0
        metrics.add_metric(name="MaintenanceDurationMs", unit=MetricUnit.Milliseconds, value=ms)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deadline = deadline_for(context)
    parsed = parse(event=event, model=ConsolidateEvent)
    received = receive(parsed)
    metrics.add_metric(name=METRICS[received.trigger], unit=MetricUnit.Count, value=1)
    # The detail holds sequence numbers only (shared.agent.turn._announce_compaction), no text.
    logger.info("consolidation requested", extra=received.model_dump(mode="json"))
    outcome = run(parsed, received, deadline)
    publish_metrics(outcome)
    # Counts and ids only: no summary or fact text leaves the stores through the result or logs.
    result = received.model_dump(mode="json")
    result["outcome"] = outcome.model_dump(mode="json") if outcome is not None else None
    return result
