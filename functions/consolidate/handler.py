"""The consolidate function: the hourly schedule and Sigil's CompactionDue and MaintenanceDue events,
parsed here, run by shared.consolidation.trigger. Its result and logs hold counts and ids, never text.
A CompactionDue's run logs under the correlation id of the turn that emitted it (the schedule's, none)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared import cloud, correlation
from shared.consolidation.deadline import Deadline
from shared.consolidation.trigger import ConsolidateEvent, consolidate, publish, receive
from shared.observability import logger, metrics, tracer

# Stop this long before Lambda's timeout: time to finish the unit in hand, release leases and log.
MARGIN_S = 60.0


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deadline = Deadline.before_timeout(context, MARGIN_S)
    received = receive(parse(event=event, model=ConsolidateEvent))
    with correlation.correlated(received.correlation_id, logger=logger, tracer=tracer):
        publish(received.metrics())
        # The detail holds sequence numbers only (shared.agent.window.announce_compaction), no text.
        logger.info("consolidation requested", extra=received.model_dump(mode="json"))
        done = consolidate(*cloud.consolidator(), received, deadline=deadline)
        publish(done.metrics())
        return received.model_dump(mode="json") | done.model_dump(mode="json")
