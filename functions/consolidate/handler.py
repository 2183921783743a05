"""The consolidate function: the hourly schedule and Sigil's CompactionDue and MaintenanceDue events,
parsed here, run by shared.consolidation.trigger. The schedule's tick first sweeps the overdue
tasks (shared.tasks.sweep: a task whose step was dead-lettered, or that waits for an answer past
its deadline, is timed out and its user told). Its result and logs hold counts and ids, never text.
A CompactionDue's run logs under the correlation id of the turn that emitted it (the schedule's, none).
An SQS batch from the extraction queue holds TurnCommitted events (per-turn extraction): each runs
under its turn's correlation id, and the answer is the partial batch response."""

from __future__ import annotations

from typing import Any

from shared.coldstart import cold_imports

with cold_imports():  # without the collector's passes or pydantic's plugin search (shared.coldstart)
    from aws_lambda_powertools.utilities.parser import parse
    from aws_lambda_powertools.utilities.parser.models import SqsModel
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from shared import cloud, correlation
    from shared.consolidation.deadline import Deadline
    from shared.consolidation.trigger import ConsolidateEvent, consolidate, extract_turns, publish, receive
    from shared.observability import logger, metrics, tracer
    from shared.tasks.sweep import sweep_tasks

# Stop this long before Lambda's timeout: time to finish the unit in hand, release leases and log.
MARGIN_S = 60.0


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "Records" in event:
        return _turns(event)
    deadline = Deadline.before_timeout(context, MARGIN_S)
    received = receive(parse(event=event, model=ConsolidateEvent))
    with correlation.correlated(received.correlation_id, logger=logger, tracer=tracer):
        publish(received.metrics())
        # The detail holds sequence numbers only (shared.agent.window.announce_compaction), no text.
        logger.info("consolidation requested", extra=received.model_dump(mode="json"))
        backend, model = cloud.consolidator()
        # Before the hourly run, which may use up the invocation; it reads the task store only.
        swept = sweep_tasks(backend) if received.trigger == "schedule" else None
        done = consolidate(backend, model, received, deadline=deadline)
        publish(done.metrics())
        tasks = {"tasks_swept": swept.model_dump(mode="json")} if swept is not None else {}
        return received.model_dump(mode="json") | done.model_dump(mode="json") | tasks


def _turns(event: dict[str, Any]) -> dict[str, Any]:
    logger.set_correlation_id(None)  # each record binds its own
    batch = parse(event=event, model=SqsModel)
    done = extract_turns(
        *cloud.consolidator(),
        batch,
        bind=lambda cid: correlation.correlated(cid, logger=logger, tracer=tracer),
    )
    return done.response() | {"extractions": [r.model_dump(mode="json") for r in done.results]}
