"""The agent: the function that runs turns, fed by the lanes' FIFO queues (one event source each)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.function import SigilFunction

# A batch holds up to 10 turns, run one after another (in order within each session); a turn is
# an LLM loop of up to 20 tool calls. The lanes' visibility timeout is derived from this.
TIMEOUT = Duration.minutes(10)
BATCH_SIZE = 10


class Agent(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        turns: Sequence[sqs.IQueue],
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
        max_concurrency: int,
        reserved_concurrency: int | None,
        paused_from: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = SigilFunction(
            self,
            "Handler",
            source="agent",
            description="Sigil agent: runs each session's turns in order from the FIFO lanes",
            timeout=TIMEOUT,
            memory_size=1024,
            layer=layer,
            log_group=log_group,
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        # Adds sqs:ReceiveMessage/DeleteMessage/ChangeMessageVisibility on each queue to the role.
        for n, queue in enumerate(turns):
            self.function.add_event_source(
                sources.SqsEventSource(
                    queue,
                    batch_size=BATCH_SIZE,
                    # The handler reports the failed turns (and the rest of their session's group),
                    # so the other sessions' turns in the batch are not retried with them.
                    report_batch_item_failures=True,
                    # At most this many batches at once per queue, however long it is: with each
                    # batch's turns run in turn, it bounds how many model calls stream at a time.
                    max_concurrency=max_concurrency,
                    # The queues a reshard added wait, disabled, until the older ones have run
                    # what was queued before it (docs/scale.md#sharded-lanes).
                    enabled=paused_from is None or n < paused_from,
                )
            )
