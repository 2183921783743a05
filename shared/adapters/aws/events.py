"""EventBus on EventBridge: one PutEvents entry per domain event, source `sigil`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from shared import serde
from shared.adapters.aws import clients
from shared.errors import SigilError
from shared.models import EVENT_SOURCE, DomainEvent

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient

SOURCE: Final = EVENT_SOURCE


class EventPublishError(SigilError):
    """EventBridge refused the entry (PutEvents answers 200 and reports failures per entry)."""

    code = "event_publish_failed"
    http_status = 502


class EventBridgeBus:
    def __init__(
        self, event_bus_name: str, *, client: EventBridgeClient | None = None, region: str | None = None
    ) -> None:
        self.event_bus_name = event_bus_name
        self.client = client if client is not None else clients.events(region)

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
