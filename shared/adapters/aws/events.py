"""EventBus on EventBridge: one PutEvents entry per domain event, source `sigil`.

A delayed event (`publish_after`: the per-turn extraction's TurnCommitted) goes to an SQS
standard queue instead, with DelaySeconds, since EventBridge cannot hold an event: the queue
keeps it, nobody waits, and the consolidate function's SQS event source receives it once the
delay has passed (infra/constructs/consolidation.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from shared import serde
from shared.adapters.aws import clients
from shared.errors import SigilError
from shared.models import EVENT_SOURCE, DomainEvent

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient
    from mypy_boto3_sqs.client import SQSClient

SOURCE: Final = EVENT_SOURCE
# SQS's longest DelaySeconds.
MAX_DELAY_S: Final = 900


class EventPublishError(SigilError):
    """EventBridge refused the entry (PutEvents answers 200 and reports failures per entry)."""

    code = "event_publish_failed"
    http_status = 502


class EventBridgeBus:
    def __init__(
        self,
        event_bus_name: str,
        *,
        client: EventBridgeClient | None = None,
        region: str | None = None,
        delay_queue_url: str | None = None,
        sqs: SQSClient | None = None,
    ) -> None:
        self.event_bus_name = event_bus_name
        self.client = client if client is not None else clients.events(region)
        self.delay_queue_url = delay_queue_url
        self._sqs = sqs
        self._region = region

    def publish_after(self, event: DomainEvent, delay_s: float) -> None:
        if not self.delay_queue_url:
            raise SigilError(
                f"no delay queue for {event.type} (SIGIL_EXTRACTION_QUEUE_URL is not set)",
                code="misconfigured",
            )
        if self._sqs is None:
            self._sqs = clients.sqs(self._region)
        self._sqs.send_message(
            QueueUrl=self.delay_queue_url,
            MessageBody=serde.dumps(event),
            # Whole seconds, rounded up: never delivered before the debounce has passed.
            DelaySeconds=min(MAX_DELAY_S, max(0, math.ceil(delay_s))),
        )

    def forget_session(self, workspace_id: str, session_id: str) -> int:
        # EventBridge keeps nothing once delivered. A TurnCommitted still delayed in the
        # extraction queue cannot be picked out of SQS; it expires within the queue's hour, and
        # delivered, it finds no session and does nothing.
        return 0

    def publish(self, event: DomainEvent) -> None:
        result = self.client.put_events(
            Entries=[
                {
                    "Source": SOURCE,
                    "DetailType": event.type,
                    "Detail": serde.dumps(event),
                    "EventBusName": self.event_bus_name,
                }
            ]
        )
        if result.get("FailedEntryCount", 0):
            failed = result["Entries"][0] if result.get("Entries") else {}
            raise EventPublishError(
                f"EventBridge refused {event.type} for workspace {event.workspace_id}: "
                f"{failed.get('ErrorCode', 'unknown')} {failed.get('ErrorMessage', '')}".rstrip()
            )
