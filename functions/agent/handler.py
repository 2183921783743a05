"""The agent: SQS FIFO batches of lane items, one turn per item, in order within each session.

A failing turn fails the rest of its session's records in the batch (skip_group_on_error), so a
session's turns never run out of order, while the other sessions in the batch carry on. On the
queue's last delivery of a record (ApproximateReceiveCount has reached maxReceiveCount, which
SIGIL_LANE_MAX_ATTEMPTS must match), the user gets `give_up_turn`'s apology before SQS moves the
record to the dead-letter queue, rather than silence. That covers the records skipped behind a
failed one too: they reach their last delivery alongside it and are dead-lettered with it.
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ConfigDict, Json

from shared import cloud
from shared.agent.turn import give_up_turn, run_turn
from shared.models import LaneItem
from shared.observability import logger, metrics, tracer

# A child of the powertools logger's "sigil": the processor logs each failed record's traceback here.
log = logging.getLogger("sigil.agent")


class TurnRecord(SqsRecordModel):
    # The processor logs a record's validation error with its traceback; pydantic would quote the
    # offending input, which is the user's message.
    model_config = ConfigDict(hide_input_in_errors=True)

    body: Json[LaneItem]  # the producer is shared.adapters.aws.sqs, through shared.serde


processor = SqsFifoPartialProcessor(model=TurnRecord, skip_group_on_error=True, logger=log)


def record_handler(record: TurnRecord) -> None:
    run_turn(cloud.turn_deps(), record.body)


@logger.inject_lambda_context(log_event=False)  # the records carry the users' messages
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    try:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    finally:
        # In `finally`: when every record fails, the processor raises instead of answering, and
        # those records are dead-lettered just the same.
        _give_up_on_last_deliveries()
        metrics.add_metric(
            name="TurnsCompleted", unit=MetricUnit.Count, value=len(processor.success_messages)
        )
        metrics.add_metric(name="TurnsFailed", unit=MetricUnit.Count, value=len(processor.fail_messages))


def _give_up_on_last_deliveries() -> None:
    max_receives = cloud.settings().lane_max_attempts
    for record in processor.fail_messages:  # in batch order, so apologies keep the session's order
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
            give_up_turn(cloud.turn_deps(), item)
        except Exception:
            # Best effort: the record goes to the dead-letter queue whatever happens here, and the
            # other records of the batch still deserve their apology.
            log.exception("could not apologise for a dead-lettered turn", extra=context)
            continue
        log.warning("turn given up on its last delivery", extra=context)
        metrics.add_metric(name="TurnsGivenUp", unit=MetricUnit.Count, value=1)
