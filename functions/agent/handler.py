"""The agent: SQS FIFO batches of lane items to shared.agent.batch, one turn per item, in order
within each session and the batch's sessions at once, all within the invocation's remaining time
(less SIGIL_TURN_RESERVE_S); the answer is the partial batch response (batchItemFailures). Each
record's turn runs under its lane item's correlation id (shared.agent.batch)."""

from __future__ import annotations

from functools import partial
from typing import Any

from shared.coldstart import cold_imports

with cold_imports():  # without the collector's passes or pydantic's plugin search (shared.coldstart)
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from shared import cloud
    from shared.agent.batch import batch_deadline, lane_processor, plan_batch, run_record, settle, shared_deps
    from shared.observability import logger, metrics, tracer


@logger.inject_lambda_context(log_event=False)  # the records carry the users' messages
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # Each record binds its own id; none is left over from the last invocation for the lines between.
    logger.set_correlation_id(None)
    settings = cloud.settings()
    # Read first: the time the function has left bounds every turn and model call of the batch.
    until = batch_deadline(context, settings.turn_reserve_s)
    records: list[dict[str, Any]] = event["Records"]
    plan = plan_batch(records, settings.coalesce_burst)
    processor = lane_processor()
    # The batch's sessions run in parallel threads: the first to need the deps builds them once.
    deps = shared_deps(cloud.turn_deps)
    handler = partial(run_record, plan, deps, until=until, min_turn_s=settings.turn_min_s)
    try:
        with processor(records, handler, context):
            processor.process()
        return processor.response()
    finally:
        # In `finally`: when every record fails, the processor raises instead of answering.
        settle(processor, deps, settings.lane_max_attempts)
