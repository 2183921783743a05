"""The agent's SQS event-source mapping: a poller that receives batches and invokes the function.

Batches of up to ten, partial batch failures, redelivery after the visibility timeout and moto's
redrive to the dead-letter queue, as Lambda's mapping behaves on a FIFO queue.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.local.lambda_runtime import InvocationError

log = logging.getLogger("sigil.aws_mode")


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """An SQS API message attribute in the shape Lambda's SQS event gives it."""

    def b64(raw: Any) -> str:
        return base64.b64encode(raw).decode() if isinstance(raw, bytes) else str(raw)

    converted: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues", [])),
        "binaryListValues": [b64(v) for v in value.get("BinaryListValues", [])],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        converted["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        converted["binaryValue"] = b64(value["BinaryValue"])
    return converted


def sqs_event(messages: Sequence[Mapping[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """ReceiveMessage's messages as the SQS event Lambda delivers (events/agent_sqs_fifo_batch.json)."""
    records = []
    for m in messages:
        record: dict[str, Any] = {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": dict(m.get("Attributes", {})),
            "messageAttributes": {
                name: _lambda_message_attribute(value)
                for name, value in m.get("MessageAttributes", {}).items()
            },
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }
        if "MD5OfMessageAttributes" in m:
            record["md5OfMessageAttributes"] = m["MD5OfMessageAttributes"]
        records.append(record)
    return {"Records": records}


@dataclass
class PollerThread:
    """A daemon thread running `step` until stopped; `step` says whether it found work."""

    name: str
    step: Callable[[], bool]
    idle_s: float
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.step()
            except Exception:
                # A poller that dies silently would look like a lost message; keep polling.
                log.exception("poller step failed", extra={"poller": self.name})
                busy = False
            if not busy:
                self._stop.wait(self.idle_s)


class FifoPoller:
    """The agent's SQS FIFO event-source mapping: receive a batch, invoke, delete what succeeded.

    One batch at a time. Lambda runs batches of different message groups in parallel; one at a
    time keeps every guarantee (a group's messages are never in two batches at once, and each
    batch is in group order) and is what makes a short visibility timeout safe: a batch that
    outlasts it is not received again by anyone while it runs.
    """

    def __init__(
        self,
        sqs: Any,
        *,
        queue_url: str,
        queue_arn: str,
        region: str,
        invoke: Callable[[dict[str, Any]], Any],
        batch_size: int = 10,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.region = region
        self.invoke = invoke
        self.batch_size = batch_size

    def poll_once(self) -> int:
        """Handle one batch; the number of records received (0 when the queue had none visible)."""
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            # Lambda's records carry every system attribute: the group, the sequence number and
            # ApproximateReceiveCount, which the agent compares with maxReceiveCount.
            AttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return 0
        try:
            result = self.invoke(sqs_event(messages, queue_arn=self.queue_arn, region=self.region))
        except InvocationError as exc:
            # A function error fails the whole batch: every record comes back after the timeout.
            log.warning(
                "agent batch failed; its records return after the visibility timeout",
                extra={"records": len(messages), "error": exc.error_type},
            )
            return len(messages)
        failed = _failed_ids(result, {m["MessageId"] for m in messages})
        if failed is None:
            log.warning("agent answered an unreadable batchItemFailures; the whole batch is retried")
            return len(messages)
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            answer = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in answer.get("Failed", []):
                log.warning("could not delete a handled record", extra={"code": failure.get("Code")})
        if failed:
            log.info(
                "records failed; they return after the visibility timeout",
                extra={
                    "failed": len(failed),
                    "records": len(messages),
                    "receive_counts": ",".join(
                        m["Attributes"].get("ApproximateReceiveCount", "?")
                        for m in messages
                        if m["MessageId"] in failed
                    ),
                },
            )
        return len(messages)


def _failed_ids(result: Any, received: set[str]) -> set[str] | None:
    """The message ids a partial batch response lists; None when Lambda would fail the batch.

    Lambda treats a response it cannot read, or an id that is empty or not in the batch, as a
    failure of the whole batch.
    """
    if result is None:
        return set()
    if not isinstance(result, dict):
        return None
    failures = result.get("batchItemFailures") or []
    if not isinstance(failures, list):
        return None
    ids = set()
    for failure in failures:
        item = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not item or item not in received:
            return None
        ids.add(item)
    return ids
