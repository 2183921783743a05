"""EventBus contract: what is published reaches the bus's consumers whole, once; a delayed event is
held back until its delay has passed. Read back where each set's consumers get events: the local
scheduler's handlers (embedded), a rule's target queue and the delay queue (EventBridge and SQS on
moto). When a consumer runs is the runtime's (see test_embedded_scheduler)."""

from __future__ import annotations

from typing import Literal

import pytest

from shared import serde
from shared.models import DomainEvent

from .builders import at
from .factories import ContractBackend


def _sorted(events: list[DomainEvent]) -> list[DomainEvent]:
    # EventBridge promises no order, so the sets are compared as collections.
    return sorted(events, key=serde.dumps)


@pytest.mark.parametrize("event_type", ["CompactionDue", "MaintenanceDue"])
def test_a_published_event_reaches_the_consumers_whole(
    contract: ContractBackend, ws_a: str, event_type: Literal["CompactionDue", "MaintenanceDue"]
) -> None:
    watch = contract.watch_events()
    event = DomainEvent(
        type=event_type,
        workspace_id=ws_a,
        session_id="s1",
        detail={"tier1": 50},
        at=at(0),
        correlation_id="turn-1",
    )
    contract.backend.events.publish(event)

    assert watch.due() == [event]
    assert watch.held() == 0
    assert watch.due() == []  # taken once


def test_events_published_in_a_row_all_arrive(contract: ContractBackend, ws_a: str) -> None:
    watch = contract.watch_events()
    events = [
        DomainEvent(type="CompactionDue", workspace_id=ws_a, detail={"n": i}, at=at(i)) for i in range(5)
    ]
    for event in events:
        contract.backend.events.publish(event)

    assert _sorted(watch.due()) == _sorted(events)


def test_publish_after_holds_an_event_for_its_delay(contract: ContractBackend, ws_a: str) -> None:
    # The per-turn extraction's TurnCommitted, held for its debounce (SQS DelaySeconds in the
    # cloud, an available-at time on the local bus).
    watch = contract.watch_events()
    held = DomainEvent(type="TurnCommitted", workspace_id=ws_a, session_id="s1", detail={"seq": 1}, at=at(0))
    now = held.model_copy(update={"detail": {"seq": 3}})
    # Long enough that no loaded machine gets past it before the reads below.
    contract.backend.events.publish_after(held, 600.0)
    contract.backend.events.publish_after(now, 0.0)

    assert watch.due() == [now]
    assert watch.held() == 1
