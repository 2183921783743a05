"""The lanes: SQS FIFO queues of turns, a message group per session, and their dead-letter queue.

One queue unless the stack shards the lanes (`-c lanes=N`): the webhook then sends each session's
turns to queue `lane_queue(session, N)` (shared.adapters.aws.sqs), and each queue has its own
event source on the agent. Queue 0 keeps the name and logical id of the single queue.
"""

from __future__ import annotations

from aws_cdk import Duration, Fn
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

MAX_RECEIVE_COUNT = 5


class Lanes(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        consumer_timeout: Duration,
        shards: int = 1,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            queue_name=f"{name_prefix}-turns-dlq.fifo",
            fifo=True,
            content_based_deduplication=False,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # The longest SQS allows: time to find the cause before a failed turn is gone.
            retention_period=Duration.days(14),
        )
        # The stage in the name lets dev and prod share an account and keeps the console readable.
        self.queues = [
            self._turns(
                "Turns" if n == 0 else f"Turns{n}",
                f"{name_prefix}-turns{'' if n == 0 else f'-{n}'}.fifo",
                consumer_timeout,
            )
            for n in range(shards)
        ]
        self.turns = self.queues[0]

    def queue_urls(self) -> str:
        """SIGIL_LANE_QUEUE_URLS: every lane queue's URL, in shard order, comma-separated."""
        return Fn.join(",", [queue.queue_url for queue in self.queues])

    def grant_send_messages(self, grantee: iam.IGrantable) -> None:
        for queue in self.queues:
            queue.grant_send_messages(grantee)

    def _turns(self, construct_id: str, name: str, consumer_timeout: Duration) -> sqs.Queue:
        return sqs.Queue(
            self,
            construct_id,
            queue_name=name,
            fifo=True,
            # The webhook sets MessageDeduplicationId to the platform's event id, which wins over
            # the content, so a redelivered webhook is dropped while two identical texts stay two
            # turns. On for EventBridge Scheduler, which sends no id (shared.adapters.aws.schedules):
            # an occurrence's body names its time, so a retried delivery of it is dropped.
            content_based_deduplication=True,
            # High-throughput FIFO: the limits apply per session (message group), not per queue.
            deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
            fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # AWS's rule for queues behind a Lambda event source: at least six times the function
            # timeout, so a batch still being worked on (or retried after throttling) never
            # becomes visible to a second consumer and runs twice.
            visibility_timeout=Duration.seconds(6 * consumer_timeout.to_seconds()),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letters, max_receive_count=MAX_RECEIVE_COUNT
            ),
        )
