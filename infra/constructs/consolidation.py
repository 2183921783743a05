"""Consolidation: the event bus, and the three ways the consolidate function is started.

CompactionDue (published by the agent when a session's Tier 1 grew by 50 messages) starts it for
one session; the hourly schedule starts it for decay, promotion, pruning, deduplication, caps,
embedding backfill and any work a missed event left behind; and the extraction queue, an SQS
standard queue the agent sends each TurnCommitted to with the workspace's debounce as its
DelaySeconds, starts it for per-turn fact extraction once the delay has passed (no Lambda waits).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.function import SigilFunction

# shared/adapters/aws/events.py publishes every domain event with this source and its type as
# the detail-type; MaintenanceDue lets an operator ask for a workspace's maintenance by hand.
EVENT_SOURCE = "sigil"
DETAIL_TYPES = ["CompactionDue", "MaintenanceDue"]
TIMEOUT = Duration.minutes(15)
# A TurnCommitted whose extraction failed this often (the model down) goes to the dead-letter
# queue; compaction extracts its messages when they roll out all the same.
EXTRACTION_RECEIVE_COUNT = 3
EXTRACTION_BATCH_SIZE = 10
# Most of the function's billed time is spent waiting on the consolidation model (per-turn
# extraction is one model call an invocation), and Lambda bills that wait by the memory held.
# 512 MB halves it from 1,024 and leaves room: the handler holds about 70 MB once imported, and a
# compaction's batch of 50 messages or embeddings adds little. CPU-bound work (the hourly
# maintenance) runs at half the CPU share for twice as long, which costs the same GB-seconds.
MEMORY_MB = 512


class Consolidation(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
        reserved_concurrency: int | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bus = events.EventBus(self, "Bus", event_bus_name=f"{name_prefix}-events")
        self.handler = SigilFunction(
            self,
            "Handler",
            source="consolidate",
            description="Sigil consolidate: summaries, triples, decay and housekeeping of memory",
            timeout=TIMEOUT,
            memory_size=MEMORY_MB,
            layer=layer,
            log_group=log_group,
            # A throttled event waits in Lambda's own retry queue; the hourly run catches up.
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        # Work is idempotent and the hourly run catches up on anything dropped, so a few
        # retries within the hour are enough.
        target = targets.LambdaFunction(self.function, retry_attempts=2, max_event_age=Duration.hours(1))
        self.compaction_rule = events.Rule(
            self,
            "CompactionDue",
            event_bus=self.bus,
            description="Domain events that ask for consolidation",
            event_pattern=events.EventPattern(source=[EVENT_SOURCE], detail_type=DETAIL_TYPES),
            targets=[target],
        )
        # Scheduled rules live on the default bus: a custom bus cannot carry a schedule.
        self.hourly_rule = events.Rule(
            self,
            "Hourly",
            description="Hourly memory maintenance",
            schedule=events.Schedule.rate(Duration.hours(1)),
            targets=[target],
        )
        self.extraction_dead_letters = sqs.Queue(
            self,
            "ExtractionDeadLetters",
            queue_name=f"{name_prefix}-extraction-dlq",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.extraction = sqs.Queue(
            self,
            "Extraction",
            queue_name=f"{name_prefix}-extraction",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # At least six times the consumer's timeout (AWS's rule for a Lambda event source).
            visibility_timeout=Duration.seconds(6 * TIMEOUT.to_seconds()),
            # A turn's facts are worth extracting within the hour; compaction does the rest.
            retention_period=Duration.hours(1),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.extraction_dead_letters, max_receive_count=EXTRACTION_RECEIVE_COUNT
            ),
        )
        # Adds sqs:ReceiveMessage/DeleteMessage/ChangeMessageVisibility on this queue to the role.
        self.function.add_event_source(
            sources.SqsEventSource(
                self.extraction,
                batch_size=EXTRACTION_BATCH_SIZE,
                # The handler fails only the records whose extraction raised.
                report_batch_item_failures=True,
                # Two at once at most: one cheap call per quiet session, within the function's cap.
                max_concurrency=2,
            )
        )
