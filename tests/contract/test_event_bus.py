"""EventBus contract: the port only publishes; delivery is the runtime's (see test_embedded_scheduler)."""

from __future__ import annotations

from typing import Literal

import pytest

from shared.models import DomainEvent

from .builders import at
from .factories import ContractBackend


@pytest.mark.parametrize("event_type", ["CompactionDue", "MaintenanceDue"])
def test_publish_accepts_every_event_type(
    contract: ContractBackend, ws_a: str, event_type: Literal["CompactionDue", "MaintenanceDue"]
) -> None:
    event = DomainEvent(type=event_type, workspace_id=ws_a, session_id="s1", detail={"tier1": 50}, at=at(0))
    contract.backend.events.publish(event)


def test_publish_of_many_events_in_a_row(contract: ContractBackend, ws_a: str) -> None:
    for i in range(5):
        contract.backend.events.publish(DomainEvent(type="CompactionDue", workspace_id=ws_a, detail={"n": i}))
