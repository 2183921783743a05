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
kept for the apologies (`batch_deadline`). Each turn runs inside it (shared.deadline),
so a call that would outlast the function, the model's or any other the turn makes (embedder,
index, stores, channel posts), is cut (DeadlineExceeded, a provider failure like any other)
rather than holding the batch until Lambda kills it, which would return every record, the
finished ones too, with no apology for any. A turn with less than SIGIL_TURN_MIN_S left is not
started: its record fails alone (TurnNotStarted; the rest of its session's follow through
skip_group_on_error) and SQS delivers it again, while the records that ran are reported done.
On its last delivery it is apologised for like any failure.

Each record's turn runs under its lane item's correlation id (shared.correlation): the webhook
request's id is on every log line of the turn and of its outbound posts, on its audit record and on
the CompactionDue it emits, and an X-Ray annotation on the turn's own subsegment.

Each turn's audit record becomes metrics (TurnDuration, TokensIn, TokensOut, ToolCalls, CostUSD
and a count named Outcome_<outcome>), without user or session dimensions, and its tokens and cost
once more per workspace (WorkspaceTokensIn, WorkspaceTokensOut, WorkspaceCostUSD); a turn failed
by its model provider also counts ProviderErrors. The names are shared.metric_catalogue's.

The batch's sessions run at once, one worker thread per session (SqsFifoGroupsProcessor, at most
MAX_PARALLEL_SESSIONS): a message waits for its own session's earlier turns only, not for other
sessions' turns that happen to share its batch (docs/scale.md). Each worker runs in a copy of the
invocation's context (the correlation id, the deadline in scope: ContextVars), all under the one
batch deadline; a worker's log lines carry its own turn's correlation id (powertools' thread-local
keys). The records' outcomes are then settled in batch order on the invocation's thread, so
batchItemFailures, the processor's lists and the apologies are what a sequential run gives.

The agent function drives it with powertools' processor as a context manager:
`with processor(records, partial(run_record, plan, deps, until=..., min_turn_s=...)):
processor.process()`, then `settle`.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import contextvars
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
from aws_lambda_powertools.utilities.batch.exceptions import ExceptionInfo
from aws_lambda_powertools.utilities.data_classes import SQSRecord
from pydantic import BaseModel, ConfigDict, Json, ValidationError

from shared import correlation
from shared.agent.coalesce import coalesce
from shared.agent.steps import first_delivery, redelivered
from shared.agent.turn import UNDELIVERED, TurnDeps, give_up_turn, run_turn
from shared.deadline import deadline, remaining
from shared.errors import ProviderError, SigilError, TurnNotStarted
from shared.lazy import once
from shared.metric_catalogue import (
    APOLOGIES_UNDELIVERED,
    COST_USD,
    OUTCOMES,
    PROVIDER_ERRORS,
    TOKENS_IN,
    TOKENS_OUT,
    TOOL_CALLS,
    TURN_DURATION,
    TURNS_COALESCED,
    TURNS_COMPLETED,
    TURNS_FAILED,
    TURNS_GIVEN_UP,
    TURNS_NOT_STARTED,
    WORKSPACE_COST_USD,
    WORKSPACE_TOKENS_IN,
    WORKSPACE_TOKENS_OUT,
)
from shared.models import AuditRecord, LaneItem
from shared.observability import logger, metrics, per_workspace, tracer

# A child of the powertools logger's "sigil": the processor logs each failed record's traceback here.
log = logging.getLogger("sigil.agent")


class ExpectedInOneLine(logging.Filter):
    """A failed record whose error is a SigilError (a model server that does not answer, a
    platform that refuses) is said on the processor's line, with the error's message as its
    cause, instead of as a traceback per record: the message says all there is. Any other
    error is a bug and keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, SigilError):
            cause = f"{type(error).__name__}: {error.message}"
            record.msg = f"{record.msg}: {cause.replace('%', '%%') if record.args else cause}"
            record.exc_info, record.exc_text = None, None
        return True


log.addFilter(ExpectedInOneLine())

Deps = Callable[[], TurnDeps]  # called when a turn needs them: the caller builds them lazily, once


class RecordAttributes(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    ApproximateReceiveCount: str
    MessageGroupId: str | None = None


class TurnRecord(BaseModel):
    """An SQS record of a lane: the parts of powertools' SqsRecordModel the agent reads. Not that
    model itself: importing it imports powertools' models of every event source, 13 ms of each
    cold start (bench/aws_calls.py), and the processor takes any pydantic model."""

    # The processor logs a record's validation error with its traceback; pydantic would quote the
    # offending input, which is the user's message.
    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    messageId: str
    receiptHandle: str
    body: Json[LaneItem]  # the producer is shared.adapters.aws.sqs, through shared.serde
    attributes: RecordAttributes


# A batch holds at most 10 records (the event source's batch size), so at most 10 sessions.
MAX_PARALLEL_SESSIONS: Final = 10

# True in a worker thread's context: its turns put their correlation id on the thread's own log
# keys, since the logger's keys are one dict for the process.
_in_worker: ContextVar[bool] = ContextVar("sigil_batch_worker", default=False)


class _ThreadKeys:
    """The logger `correlation.correlated` is given in a worker: powertools' thread-local keys."""

    def set_correlation_id(self, value: str | None) -> None:
        logger.thread_safe_append_keys(correlation_id=value)


def _log_keys() -> correlation.CorrelatedLogger:
    return _ThreadKeys() if _in_worker.get() else logger


@dataclass(frozen=True)
class _Outcome:
    """What one record came to in its session's worker, settled later on the invocation's thread."""

    data: Any = None  # the record as the handler got it (None when it did not parse)
    result: Any = None
    error: Any = None  # sys.exc_info() of its failure
    invalid: bool = False  # its body is no lane item
    skipped: bool = False  # an earlier record of its session failed


class SqsFifoGroupsProcessor(SqsFifoPartialProcessor):
    """powertools' FIFO processor with skip_group_on_error, each message group in its own thread.

    A group's records run in order in one worker; a failed (or unreadable) record skips the rest
    of its group, as the sequential processor does. The outcomes are then recorded in batch order
    on the calling thread (success_handler, failure_handler), so everything read after `process`
    (success_messages, fail_messages, exceptions, the response) is in the order it always was.
    """

    def __init__(self, *, max_workers: int = MAX_PARALLEL_SESSIONS, logger: logging.Logger | None = None):
        # Typed for SqsRecordModel's subclasses; the processor only validates a record with it.
        super().__init__(model=TurnRecord, skip_group_on_error=True, logger=logger)  # type: ignore[arg-type]
        self.max_workers = max_workers

    def process(self) -> list[tuple[Any, ...]]:
        groups: dict[str | None, list[dict[str, Any]]] = {}
        for record in self.records:
            groups.setdefault(_group_of(record), []).append(record)
        if len(groups) < 2 or self.max_workers < 2:
            return super().process()
        outcomes: dict[int, _Outcome] = {}
        with ThreadPoolExecutor(min(self.max_workers, len(groups)), thread_name_prefix="session") as pool:
            # A copy of this context per group: the deadline and anything else in scope, in each.
            runs = [pool.submit(contextvars.copy_context().run, self._run_group, g) for g in groups.values()]
            for run in runs:
                outcomes.update(run.result())
        return [self._settle(record, outcomes[id(record)]) for record in self.records]

    def _run_group(self, records: list[dict[str, Any]]) -> dict[int, _Outcome]:
        _in_worker.set(True)
        outcomes: dict[int, _Outcome] = {}
        failed = False
        for record in records:
            if failed:
                outcomes[id(record)] = _Outcome(skipped=True)
                continue
            data = None
            try:
                data = self._to_batch_type(record=record, event_type=self.event_type, model=self.model)
                if self._handler_accepts_lambda_context:
                    result = self.handler(record=data, lambda_context=self.lambda_context)
                else:
                    result = self.handler(record=data)
                outcomes[id(record)] = _Outcome(data=data, result=result)
            except ValidationError as exc:
                # As the base processor tells a poison pill from a handler's failure.
                invalid = data is None and exc.title == TurnRecord.__name__
                outcomes[id(record)] = _Outcome(data=data, error=sys.exc_info(), invalid=invalid)
                failed = True
            except Exception:  # noqa: BLE001 -- the record fails, as in the base processor
                outcomes[id(record)] = _Outcome(data=data, error=sys.exc_info())
                failed = True
        return outcomes

    def _settle(self, record: dict[str, Any], outcome: _Outcome) -> tuple[Any, ...]:
        # What failure_handler reads to skip the rest of the group (powertools types it as None).
        self._current_group_id = _group_of(record)  # type: ignore[assignment]
        if outcome.skipped:
            skipped = self._to_batch_type(record=record, event_type=self.event_type, model=self.model)
            return self.failure_handler(record=skipped, exception=self.group_circuit_breaker_exc)
        if outcome.invalid:
            unreadable = self._to_batch_type(record=record, event_type=self.event_type)
            return self.failure_handler(record=unreadable, exception=outcome.error)
        if outcome.error is not None:
            # The failure's log line under its turn's correlation id, as when it ran here.
            body = outcome.data.body if isinstance(outcome.data, TurnRecord) else None
            with correlation.correlated(body.correlation_id if body else None, logger=logger):
                return self.failure_handler(record=outcome.data, exception=outcome.error)
        return self.success_handler(record=record, result=outcome.result)


def _group_of(record: Mapping[str, Any]) -> str | None:
    group = record.get("attributes", {}).get("MessageGroupId")
    return group if isinstance(group, str) else None


def lane_processor() -> SqsFifoPartialProcessor:
    """A batch's processor: its sessions at once, a failed record failing only the rest of its
    session's records."""
    return SqsFifoGroupsProcessor(logger=log)


def shared_deps(deps: Deps) -> Deps:
    """`deps` built once however many of the batch's workers ask for it at the same moment."""
    return once(deps)


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
        metrics.add_metric(name=TURNS_NOT_STARTED.name, unit=TURNS_NOT_STARTED.unit, value=1)
        raise TurnNotStarted(
            f"{max(left, 0.0):.1f}s left in the invocation, {min_turn_s:.1f}s needed: left to the "
            "queue's next delivery"
        )
    item = plan.leads.get(record.messageId, record.body)
    # A first delivery has no durable steps saved (shared.agent.steps): its turn reads none.
    receives = int(record.attributes.ApproximateReceiveCount)
    first = first_delivery.set(receives <= 1)
    again = redelivered.set(receives > 1)
    try:
        with deadline(until), correlation.correlated(record.body.correlation_id, logger=_log_keys()):
            audit = turn(deps, item)
    except Exception as exc:
        failed = OUTCOMES["error"]
        metrics.add_metric(name=failed.name, unit=failed.unit, value=1)
        if isinstance(exc, ProviderError):
            metrics.add_metric(name=PROVIDER_ERRORS.name, unit=PROVIDER_ERRORS.unit, value=1)
        raise
    finally:
        first_delivery.reset(first)
        redelivered.reset(again)
    turn_metrics(audit)
    if item is not record.body:
        metrics.add_metric(name=TURNS_COALESCED.name, unit=TURNS_COALESCED.unit, value=1)


# capture_error=False: a failed turn's exception may quote what the provider said about the message.
@tracer.capture_method(capture_response=False, capture_error=False)
def turn(deps: Deps, item: LaneItem) -> AuditRecord:
    """One record's turn, in its own X-Ray subsegment annotated with the correlation id."""
    if item.correlation_id:
        tracer.put_annotation(correlation.KEY, item.correlation_id)
    return run_turn(deps(), item)


def turn_metrics(audit: AuditRecord) -> None:
    metrics.add_metric(name=TURN_DURATION.name, unit=TURN_DURATION.unit, value=audit.duration_ms)
    metrics.add_metric(name=TOKENS_IN.name, unit=TOKENS_IN.unit, value=audit.tokens_in)
    metrics.add_metric(name=TOKENS_OUT.name, unit=TOKENS_OUT.unit, value=audit.tokens_out)
    metrics.add_metric(name=TOOL_CALLS.name, unit=TOOL_CALLS.unit, value=len(audit.tools_used))
    metrics.add_metric(name=COST_USD.name, unit=COST_USD.unit, value=audit.cost_usd)
    outcome = OUTCOMES[audit.outcome]
    metrics.add_metric(name=outcome.name, unit=outcome.unit, value=1)
    per_workspace(
        audit.workspace_id,
        {
            WORKSPACE_TOKENS_IN: audit.tokens_in,
            WORKSPACE_TOKENS_OUT: audit.tokens_out,
            WORKSPACE_COST_USD: audit.cost_usd,
        },
    )


def settle(processor: SqsFifoPartialProcessor, deps: Deps, max_receives: int) -> None:
    """After the batch, whether or not the processor raised (it does when every record failed,
    and those records are dead-lettered just the same): apologies, then the batch's counts."""
    give_up_on_last_deliveries(processor.fail_messages, deps, max_receives, errors=processor.exceptions)
    metrics.add_metric(
        name=TURNS_COMPLETED.name, unit=TURNS_COMPLETED.unit, value=len(processor.success_messages)
    )
    metrics.add_metric(name=TURNS_FAILED.name, unit=TURNS_FAILED.unit, value=len(processor.fail_messages))


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
        with correlation.correlated(item.correlation_id, logger=logger):
            try:
                # An apology the platform refuses (often the very failure that dead-lettered the
                # record) is no error here: give_up_turn logs it in one line and notes it on the
                # record it audits as "given_up".
                given_up = give_up_turn(deps(), item, last_error=_describe(errors, index))
            except Exception:
                # Best effort: the record goes to the dead-letter queue whatever happens here, and
                # the other records of the batch still deserve their apology.
                log.exception("could not apologise for a dead-lettered turn", extra=context)
                continue
            undelivered = given_up is not None and (given_up.error or "").startswith(UNDELIVERED)
            apology = "none" if given_up is None else "undelivered" if undelivered else "sent"
            log.warning("turn given up on its last delivery", extra={**context, "apology": apology})
        metrics.add_metric(name=TURNS_GIVEN_UP.name, unit=TURNS_GIVEN_UP.unit, value=1)
        if apology == "undelivered":
            metrics.add_metric(name=APOLOGIES_UNDELIVERED.name, unit=APOLOGIES_UNDELIVERED.unit, value=1)


def _describe(errors: Sequence[ExceptionInfo], index: int) -> str | None:
    if index >= len(errors):
        return None
    kind, value, _ = errors[index]
    return f"{kind.__name__ if kind else 'error'}: {value}" if value is not None else None
