"""Lanes contract: what a producer submits is consumed once, in order per session, across restarts."""

from __future__ import annotations

from collections import defaultdict

from shared.models import LaneItem

from .builders import lane_item
from .conftest import OpenBackend
from .factories import ContractBackend


def _by_group(items: list[LaneItem]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for item in items:
        groups[item.group_id].append(item.inbound.event_id)
    return dict(groups)


def test_a_submitted_item_is_delivered_intact(contract: ContractBackend, ws_a: str) -> None:
    item = lane_item(ws_a, "s1", text="Grüße 👋\nsecond line")
    assert contract.backend.lanes.submit(item).status == "queued"

    assert contract.drain_lane(10) == [item]
    assert contract.drain_lane(10) == []


def test_an_item_with_a_seen_dedup_id_is_delivered_once(contract: ContractBackend, ws_a: str) -> None:
    lanes = contract.backend.lanes
    first = lane_item(ws_a, "s1", event_id="evt-1", text="first")
    again = lane_item(ws_a, "s1", event_id="evt-1", text="redelivered by the platform")
    other = lane_item(ws_a, "s1", event_id="evt-2")

    assert lanes.submit(first).status == "queued"
    # A FIFO queue may accept a duplicate silently ("queued"); what matters is that it is not delivered.
    assert lanes.submit(again).status in {"queued", "duplicate"}
    assert lanes.submit(other).status == "queued"

    delivered = contract.drain_lane(10)
    assert [i.inbound.event_id for i in delivered] == ["evt-1", "evt-2"]
    assert delivered[0].inbound.text == "first"


def test_the_same_event_id_on_another_workspace_is_not_a_duplicate(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    contract.backend.lanes.submit(lane_item(ws_a, "s1", event_id="evt-1"))
    contract.backend.lanes.submit(lane_item(ws_b, "s1", event_id="evt-1"))

    delivered = contract.drain_lane(10)
    assert sorted(i.inbound.workspace_id for i in delivered) == sorted([ws_a, ws_b])


def test_each_session_is_delivered_in_submit_order(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    lanes = contract.backend.lanes
    submitted: list[LaneItem] = []
    for i in range(6):
        for workspace_id, session_id in ((ws_a, "s1"), (ws_a, "s2"), (ws_b, "s1")):
            item = lane_item(workspace_id, session_id, event_id=f"e{i}-{session_id}")
            lanes.submit(item)
            submitted.append(item)

    delivered = contract.drain_lane(100)

    assert len(delivered) == len(submitted)
    assert _by_group(delivered) == _by_group(submitted)
    assert len(_by_group(delivered)) == 3


def test_pending_items_survive_a_restart(open_backend: OpenBackend, ws_a: str) -> None:
    items = [lane_item(ws_a, "s1", event_id=f"e{i}") for i in range(3)] + [
        lane_item(ws_a, "s2", event_id="x")
    ]
    with open_backend() as before:
        for item in items:
            before.backend.lanes.submit(item)

    with open_backend() as after:
        delivered = after.drain_lane(10)
        # The dedup memory survives too: a platform retry after the restart is not run again.
        assert after.backend.lanes.submit(items[0]).status in {"queued", "duplicate"}
        assert after.drain_lane(10) == []

    assert _by_group(delivered) == _by_group(items)
    assert sorted(i.inbound.event_id for i in delivered) == sorted(i.inbound.event_id for i in items)
