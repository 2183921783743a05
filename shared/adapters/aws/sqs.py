"""Lanes on SQS FIFO: one message group per session, so a session's turns run in order.

The consumer is the agent Lambda's event source mapping (SqsFifoPartialProcessor), not this
module: the adapter is only the producer side of the port.

The lanes may be sharded over several FIFO queues, each with its own event source (one event
source runs at most 1,000 batches at once): a session's queue is `lane_queue(group, n)`, a jump
consistent hash, so a session always lands on the same queue, and raising the number of queues
from n to m moves only (m - n) / m of the sessions, every one of them to a new queue
(docs/scale.md#sharded-lanes: how a session's order is kept across that change).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from shared import serde
from shared.adapters.aws import clients
from shared.models import LaneItem
from shared.ports import SubmitResult

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient

# SQS allows up to 128 characters from this set in MessageGroupId and MessageDeduplicationId.
_FIFO_ID_MAX: Final = 128
_FIFO_ID_CHARS: Final = re.compile(r"^[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]*$")


def fifo_id(value: str) -> str:
    """`value` itself when SQS accepts it; otherwise a readable prefix and its SHA-256.

    Group and dedup ids are built from workspace, session and event ids of up to 128 characters
    each, so they can exceed SQS's limit. The digest keeps them unique (two sessions never share
    a lane, two events never share a dedup id) and the prefix keeps them recognisable in the
    console. The result is still 128 characters at most.
    """
    if len(value) <= _FIFO_ID_MAX and _FIFO_ID_CHARS.match(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()  # 64 characters
    prefix = re.sub(r"[^A-Za-z0-9._\-]", "_", value)[: _FIFO_ID_MAX - len(digest) - 1]
    return f"{prefix}~{digest}"


_JUMP_MULTIPLIER: Final = 2862933555777941757
_U64: Final = (1 << 64) - 1


def jump_hash(key: int, buckets: int) -> int:
    """Lamping and Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent Hash
    Algorithm", 2014): a bucket in [0, buckets) for a 64-bit key. Growing `buckets` moves a key only
    to one of the new buckets, and only the share of keys the new buckets should hold."""
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * _JUMP_MULTIPLIER + 1) & _U64
        candidate = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket


def lane_queue(group_id: str, queues: int) -> int:
    """The lane queue of a session's message group, among `queues`."""
    digest = hashlib.blake2b(group_id.encode(), digest_size=8).digest()
    return jump_hash(int.from_bytes(digest, "big"), queues)


class SqsLanes:
    """The producer: `queue_urls` is the lanes' queue, or their queues in shard order."""

    def __init__(
        self, queue_urls: str | Sequence[str], *, client: SQSClient | None = None, region: str | None = None
    ) -> None:
        self.queue_urls = (queue_urls,) if isinstance(queue_urls, str) else tuple(queue_urls)
        if not self.queue_urls:
            raise ValueError("the lanes need at least one queue")
        self.queue_url = self.queue_urls[0]
        self.client = client if client is not None else clients.sqs(region)

    def queue_of(self, group_id: str) -> str:
        return self.queue_urls[lane_queue(fifo_id(group_id), len(self.queue_urls))]

    def submit(self, item: LaneItem) -> SubmitResult:
        self.client.send_message(
            QueueUrl=self.queue_of(item.group_id),
            MessageBody=serde.dumps(item),
            MessageGroupId=fifo_id(item.group_id),
            MessageDeduplicationId=fifo_id(item.dedup_id),
        )
        # SQS accepts a duplicate within its 5-minute window with a 200 and drops it, so the
        # producer cannot tell: "queued" is all a FIFO lane can truthfully say.
        return SubmitResult(status="queued")
