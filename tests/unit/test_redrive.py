"""shared.agent.redrive: the item a redrive puts back, and the rule that skips a committed turn."""

from __future__ import annotations

import re

from shared.agent.preflight import turn_id_for
from shared.agent.redrive import answered, redriven, redriven_event_id, turn_ids
from shared.models import ID_PATTERN, AssistantMessage, InboundMessage, LaneItem, Sender, Session, UserMessage


def item(event_id: str = "evt-1", text: str = "hello") -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id="ws",
            session_id="web.s1",
            sender=Sender(id="alice"),
            chat_id="s1",
            text=text,
        )
    )


def session(*messages: UserMessage | AssistantMessage, events: list[str]) -> Session:
    return Session(
        id="web.s1",
        workspace_id="ws",
        active_messages=list(messages),
        recent_event_ids=events,
        recent_event_times=[2_000_000_000] * len(events),
    )


def test_a_redriven_item_is_the_same_message_under_a_derived_event_that_names_the_original() -> None:
    original = item()
    again = redriven(original)
    assert again.inbound.text == original.inbound.text
    assert again.enqueued_at == original.enqueued_at  # its place in the session's order
    assert (again.inbound.event_id, again.redrive_of, again.redrives) == ("evt-1.r1", "evt-1", 1)
    # Its commit remembers the original too, so a platform's late retry of it is still a duplicate.
    assert again.inbound.merged_event_ids == ["evt-1"]
    # Deterministic: a redrive repeated after a crash queues the same event (dropped as a duplicate).
    assert redriven(original) == again
    # A redrive of a redrive counts on from the original.
    assert redriven(again).inbound.event_id == "evt-1.r2"
    assert turn_ids(redriven(again)) == {
        turn_id_for(original),
        turn_id_for(again),
        turn_id_for(redriven(again)),
    }


def test_a_derived_event_id_of_a_longest_id_is_still_a_valid_distinct_id() -> None:
    longest = "e" * 128
    derived = redriven_event_id(longest, 1)
    assert re.match(ID_PATTERN, derived)
    assert derived != redriven_event_id("e" * 127, 1)
    assert derived.endswith(".r1")


def test_answered_skips_a_replied_turn_and_keeps_a_given_up_one() -> None:
    it = item()
    turn = turn_id_for(it)
    user = UserMessage(id=f"{turn}.u", content="hello", event_id="evt-1")
    # Never committed, or no session at all: put it back.
    assert not answered(None, it)
    assert not answered(session(events=[]), it)
    # Given up: the message kept, no reply: put it back, to be answered where it stands.
    assert not answered(session(user, events=["evt-1"]), it)
    # Replied: skip it, for the original's reply or a redrive's.
    assert answered(session(user, AssistantMessage(id=f"{turn}.a", content="hi"), events=["evt-1"]), it)
    again = redriven(it)
    reply = AssistantMessage(id=f"{turn_id_for(again)}.a", content="hi")
    assert answered(session(user, reply, events=["evt-1", "evt-1.r1"]), again)
    # Committed and rolled out of the window: nothing left to answer in place.
    assert answered(session(events=["evt-1"]), it)
