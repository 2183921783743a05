"""EventBridge's two paths to the consolidate function: the CompactionDue rule's queue, and a
timer standing in for the hourly schedule."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from shared.local.aws_mode.resources import NAME_PREFIX
from shared.local.lambda_runtime import ACCOUNT_ID, InvocationError

log = logging.getLogger("sigil.aws_mode")

SCHEDULE_RULE: Final = f"{NAME_PREFIX}-hourly"


def schedule_event(region: str, *, now: float | None = None) -> dict[str, Any]:
    """An EventBridge scheduled event (events/consolidate_schedule.json's shape)."""
    at = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{ACCOUNT_ID}:rule/{SCHEDULE_RULE}"],
        "detail": {},
    }


class ConsolidationFeed:
    """The consolidate function's two triggers: the bus rule's queue, and the schedule's timer.

    Each event is its own invocation, as EventBridge invokes a Lambda target once per event. A
    failed event is received again after the visibility timeout, up to EVENT_DELIVERIES times.
    """

    def __init__(
        self,
        sqs: Any,
        *,
        queue_url: str,
        region: str,
        invoke: Callable[[dict[str, Any]], Any],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.region = region
        self.invoke = invoke
        self.interval_s = interval_s
        self.clock = clock
        self.next_tick = clock() + interval_s

    def poll_once(self) -> bool:
        busy = self._tick()
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        for message in messages:
            event = json.loads(message["Body"])
            # moto's SQS target leaves the envelope's `account` out; EventBridge always sends it.
            event.setdefault("account", ACCOUNT_ID)
            try:
                self.invoke(event)
            except InvocationError as exc:
                log.warning(
                    "consolidate failed; the event is delivered again after the visibility timeout",
                    extra={"event_id": event.get("id"), "error": exc.error_type},
                )
                continue
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return busy or bool(messages)

    def _tick(self) -> bool:
        if self.clock() < self.next_tick:
            return False
        # One tick for however many intervals passed, as a schedule does not replay missed runs.
        while self.next_tick <= self.clock():
            self.next_tick += self.interval_s
        try:
            self.invoke(schedule_event(self.region))
        except InvocationError as exc:
            log.warning("scheduled consolidation failed", extra={"error": exc.error_type})
        return True
