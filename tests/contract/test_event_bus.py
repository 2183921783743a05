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


def test_publish_after_accepts_a_delayed_event(contract: ContractBackend, ws_a: str) -> None:
    # The per-turn extraction's TurnCommitted, held for its debounce (SQS DelaySeconds in the
    # cloud, an available-at time on the local bus); when it is delivered is the runtime's.
    event = DomainEvent(type="TurnCommitted", workspace_id=ws_a, session_id="s1", detail={"seq": 1}, at=at(0))
    contract.backend.events.publish_after(event, 5.0)
    contract.backend.events.publish_after(event.model_copy(update={"detail": {"seq": 3}}), 0.0)
