"""One SQS FIFO batch of lane items: one turn per item, in order within each session.

A failing turn fails the rest of its session's records in the batch (skip_group_on_error), so a
session's turns never run out of order, while the other sessions in the batch carry on. On the
queue's last delivery of a record (ApproximateReceiveCount has reached maxReceiveCount, which
SIGIL_LANE_MAX_ATTEMPTS must match), the user gets `give_up_turn`'s apology before SQS moves the
record to the dead-letter queue, rather than silence. That covers the records skipped behind a
failed one too: they reach their last delivery alongside it and are dead-lettered with it. An
apology the platform will not take either is counted (ApologiesUndelivered) and noted on the
turn's "given_up" audit record; the other records still get theirs.

With SIGIL_COALESCE_BURST, a session's consecutive records from one sender run as one turn
(shared.agent.coalesce): the first record of the burst runs the merged turn and the others ride
on it, succeeding with it, or failing with it through skip_group_on_error, so batchItemFailures
names every record of a failed burst. A dead-lettered burst is apologised for record by record.

The batch has a deadline: the Lambda's remaining time at its start, less SIGIL_TURN_RESERVE_S
kept for the last turn's reply and commit and for the apologies (`batch_deadline`). Each turn runs
inside it (shared.providers.deadline), so a model call that would outlast the function is cut
(DeadlineExceeded, a provider failure like any other) rather than holding the batch until Lambda
kills it, which would return every record, the finished ones too, with no apology for any. A turn
with less than SIGIL_TURN_MIN_S left is not started: its record fails alone (TurnNotStarted; the
rest of its session's follow through skip_group_on_error) and SQS delivers it again, while the
records that ran are reported done. On its last delivery it is apologised for like any failure.

Each turn's audit record becomes metrics (TurnDuration, TokensIn, TokensOut, ToolCalls, CostUSD
and a count named Outcome_<outcome>), without user or session dimensions.

The agent function drives it with powertools' processor as a context manager:
`with processor(records, partial(run_record, plan, deps, until=..., min_turn_s=...)):
processor.process()`, then `settle`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
from aws_lambda_powertools.utilities.batch.exceptions import ExceptionInfo
from aws_lambda_powertools.utilities.data_classes import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import ConfigDict, Json, ValidationError

from shared.agent.coalesce import coalesce
from shared.agent.turn import UNDELIVERED, TurnDeps, give_up_turn, run_turn
from shared.errors import TurnNotStarted
from shared.models import AuditRecord, LaneItem
from shared.observability import metrics
from shared.providers.deadline import deadline, remaining

# A child of the powertools logger's "sigil": the processor logs each failed record's traceback here.
log = logging.getLogger("sigil.agent")

Deps = Callable[[], TurnDeps]  # called when a turn needs them: the caller builds them lazily, once


class TurnRecord(SqsRecordModel):
    # The processor logs a record's validation error with its traceback; pydantic would quote the
    # offending input, which is the user's message.
    model_config = ConfigDict(hide_input_in_errors=True)

    body: Json[LaneItem]  # the producer is shared.adapters.aws.sqs, through shared.serde


def lane_processor() -> SqsFifoPartialProcessor:
    """A batch's processor: a failed record fails only the rest of its session's records."""
    return SqsFifoPartialProcessor(model=TurnRecord, skip_group_on_error=True, logger=log)


@dataclass(frozen=True)
class Plan:
    """The batch's bursts: the merged item each burst's first record runs, and the records that
    ride on it."""

    leads: dict[str, LaneItem] = field(default_factory=dict)  # message id -> merged item
    riders: set[str] = field(default_factory=set)  # message ids whose text a lead's turn carries


def plan_batch(records: Sequence[Mapping[str, Any]], enabled: bool) -> Plan:
    """Bursts among the batch's readable records; an unreadable record ends every run, so a
    record failed behind it (skip_group_on_error) never has its text in a turn that succeeded."""
    bursts = Plan()
    if not enabled:
        return bursts
    segments: list[list[TurnRecord]] = [[]]
    for raw in records:
        try:
            segments[-1].append(TurnRecord.model_validate(raw))
        except ValidationError:
            segments.append([])
    for segment in segments:
        for item, indexes in coalesce([r.body for r in segment]):
            if len(indexes) > 1:
                bursts.leads[segment[indexes[0]].messageId] = item
                bursts.riders.update(segment[i].messageId for i in indexes[1:])
    return bursts


def batch_deadline(context: object, reserve_s: float) -> float | None:
    """When the batch's turns must be done (time.monotonic()): the invocation's remaining time
    less `reserve_s`; None for a caller with no Lambda context."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if remaining_ms is None:
        return None
    return time.monotonic() + float(remaining_ms()) / 1000 - reserve_s


def run_record(
    plan: Plan, deps: Deps, record: TurnRecord, *, until: float | None = None, min_turn_s: float = 0.0
) -> None:
    """The processor's record handler (bind `plan`, `deps` and the batch's deadline with
    functools.partial). A turn with less than `min_turn_s` before `until` is not started."""
    if record.messageId in plan.riders:
        return  # its text ran in its burst's turn; had that failed, the processor skips this
    left = remaining(until)
    if left is not None and left < min_turn_s:
        metrics.add_metric(name="TurnsNotStarted", unit=MetricUnit.Count, value=1)
        raise TurnNotStarted(
            f"{max(left, 0.0):.1f}s left in the invocation, {min_turn_s:.1f}s needed: left to the "
            "queue's next delivery"
        )
    item = plan.leads.get(record.messageId, record.body)
    try:
        with deadline(until):
            audit = run_turn(deps(), item)
    except Exception:
        metrics.add_metric(name="Outcome_error", unit=MetricUnit.Count, value=1)
        raise
    turn_metrics(audit)
    if item is not record.body:
        metrics.add_metric(name="TurnsCoalesced", unit=MetricUnit.Count, value=1)


def turn_metrics(audit: AuditRecord) -> None:
    metrics.add_metric(name="TurnDuration", unit=MetricUnit.Milliseconds, value=audit.duration_ms)
    metrics.add_metric(name="TokensIn", unit=MetricUnit.Count, value=audit.tokens_in)
    metrics.add_metric(name="TokensOut", unit=MetricUnit.Count, value=audit.tokens_out)
    metrics.add_metric(name="ToolCalls", unit=MetricUnit.Count, value=len(audit.tools_used))
    metrics.add_metric(name="CostUSD", unit=MetricUnit.NoUnit, value=audit.cost_usd)
    metrics.add_metric(name=f"Outcome_{audit.outcome}", unit=MetricUnit.Count, value=1)


def settle(processor: SqsFifoPartialProcessor, deps: Deps, max_receives: int) -> None:
    """After the batch, whether or not the processor raised (it does when every record failed,
    and those records are dead-lettered just the same): apologies, then the batch's counts."""
    give_up_on_last_deliveries(processor.fail_messages, deps, max_receives, errors=processor.exceptions)
    metrics.add_metric(name="TurnsCompleted", unit=MetricUnit.Count, value=len(processor.success_messages))
    metrics.add_metric(name="TurnsFailed", unit=MetricUnit.Count, value=len(processor.fail_messages))


def give_up_on_last_deliveries(
    failed: Sequence[object], deps: Deps, max_receives: int, *, errors: Sequence[ExceptionInfo] = ()
) -> None:
    """`errors`: the processor's exception for each failed record, in the same order; each
    record's is noted on its "given_up" audit record, the reason `sigil dlq` shows."""
    for index, record in enumerate(failed):  # in batch order, so apologies keep the session's order
        if isinstance(record, SQSRecord):
            # The processor keeps a record as the plain SQS record when its body did not parse as
            # a lane item: there is no session to apologise to.
            log.error("unreadable lane record failed", extra={"message_id": record.message_id})
            continue
        if not isinstance(record, TurnRecord):
            continue  # other event sources' record types: this processor never produces them
        if int(record.attributes.ApproximateReceiveCount) < max_receives:
            continue
        item = record.body
        context = {"message_id": record.messageId, "session_id": item.inbound.session_id}
        try:
            # An apology the platform refuses (often the very failure that dead-lettered the
            # record) is no error here: give_up_turn logs it in one line and notes it on the
            # record it audits as "given_up".
            given_up = give_up_turn(deps(), item, last_error=_describe(errors, index))
        except Exception:
            # Best effort: the record goes to the dead-letter queue whatever happens here, and the
            # other records of the batch still deserve their apology.
            log.exception("could not apologise for a dead-lettered turn", extra=context)
            continue
        undelivered = given_up is not None and (given_up.error or "").startswith(UNDELIVERED)
        apology = "none" if given_up is None else "undelivered" if undelivered else "sent"
        log.warning("turn given up on its last delivery", extra={**context, "apology": apology})
        metrics.add_metric(name="TurnsGivenUp", unit=MetricUnit.Count, value=1)
        if apology == "undelivered":
            metrics.add_metric(name="ApologiesUndelivered", unit=MetricUnit.Count, value=1)


def _describe(errors: Sequence[ExceptionInfo], index: int) -> str | None:
    if index >= len(errors):
        return None
    kind, value, _ = errors[index]
    return f"{kind.__name__ if kind else 'error'}: {value}" if value is not None else None
