"""shared.agent.coalesce: a session's consecutive items from one sender become one item."""

from __future__ import annotations

import re

from shared.agent.coalesce import coalesce, merge, merged_event_id
from shared.models import ID_PATTERN, Attachment, InboundMessage, LaneItem, Sender


def item(
    event: str, text: str, session: str = "web.demo", sender: str = "alice", **extra: object
) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event,
            channel="web",
            workspace_id="default",
            session_id=session,
            sender=Sender(id=sender),
            chat_id=session,
            text=text,
            **extra,
        )
    )


def test_a_sessions_burst_becomes_one_item_and_other_sessions_keep_theirs() -> None:
    a1, k, a2 = item("e1", "first"), item("e3", "milk", session="web.kitchen"), item("e2", "second")
    out = coalesce([a1, k, a2])
    assert [indexes for _, indexes in out] == [[0, 2], [1]]
    merged, kitchen = out[0][0], out[1][0]
    assert merged.inbound.text == "first\n\nsecond"
    assert merged.inbound.event_id == merged_event_id(["e1", "e2"])
    assert merged.inbound.event_id.startswith("e1+")
    assert kitchen is k


def test_attachments_are_concatenated_and_routing_is_the_last_items() -> None:
    one = item("e1", "a", attachments=[Attachment(kind="image", id="i1")], reply_to="r1")
    two = item("e2", "b", attachments=[Attachment(kind="file", id="f2")], reply_to="r2")
    merged = merge([one, two])
    assert [a.id for a in merged.inbound.attachments] == ["i1", "f2"]
    assert merged.inbound.reply_to == "r2"
    assert merged.enqueued_at == one.enqueued_at


def test_different_senders_are_not_merged() -> None:
    out = coalesce([item("e1", "a"), item("e2", "b", sender="bob"), item("e3", "c", sender="bob")])
    assert [indexes for _, indexes in out] == [[0], [1, 2]]


def test_the_merged_id_is_deterministic_distinct_and_a_valid_identifier() -> None:

    long = "x" * 128
    assert merged_event_id(["e1", "e2"]) == merged_event_id(["e1", "e2"])
    assert merged_event_id(["e1", "e2"]) != merged_event_id(["e1", "e2", "e3"])
    assert re.match(ID_PATTERN, merged_event_id([long, "y"]))


def test_a_single_item_and_nothing() -> None:
    one = item("e1", "only")
    assert coalesce([one]) == [(one, [0])]
    assert coalesce([]) == []
