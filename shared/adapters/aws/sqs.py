"""Lanes on SQS FIFO: one message group per session, so a session's turns run in order.

The consumer is the agent Lambda's event source mapping (SqsFifoPartialProcessor), not this
module: the adapter is only the producer side of the port.
"""

from __future__ import annotations

import hashlib
import re
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


class SqsLanes:
    def __init__(self, queue_url: str, *, client: SQSClient | None = None, region: str | None = None) -> None:
        self.queue_url = queue_url
        self.client = client if client is not None else clients.sqs(region)

    def submit(self, item: LaneItem) -> SubmitResult:
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=serde.dumps(item),
            MessageGroupId=fifo_id(item.group_id),
            MessageDeduplicationId=fifo_id(item.dedup_id),
        )
        # SQS accepts a duplicate within its 5-minute window with a 200 and drops it, so the
        # producer cannot tell: "queued" is all a FIFO lane can truthfully say.
        return SubmitResult(status="queued")
