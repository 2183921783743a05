"""shared.serde: the one JSON codec every store writes with."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from shared import serde
from shared.models import (
    AssistantMessage,
    InboundMessage,
    LaneItem,
    MemoryRecord,
    Message,
    OutboundMessage,
    OutboxEntry,
    Sender,
    Session,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

WHEN = datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)

MESSAGES: list[UserMessage | AssistantMessage | ToolResultMessage] = [
    UserMessage(id="m1", content="Grüße aus Zürich 👋", sender_id="u1", event_id="e1", created_at=WHEN),
    AssistantMessage(
        id="m2",
        content="",
        tool_calls=[ToolCall(id="c1", name="search", arguments='{"q": "weather", "n": 3}')],
        model="openai/gpt-4.1-mini",
        created_at=WHEN,
    ),
    ToolResultMessage(
        id="m3", tool_call_id="c1", name="search", content='{"ok": true}', is_error=True, created_at=WHEN
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_each_message_kind_round_trips_through_the_union(
    message: UserMessage | AssistantMessage | ToolResultMessage,
) -> None:
    text = serde.dumps(message, Message)
    back: Message = serde.loads(Message, text)

    assert type(back) is type(message)
    assert back == message
    assert json.loads(text)["kind"] == message.kind


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_a_message_serialises_the_same_with_or_without_the_union(
    message: UserMessage | AssistantMessage | ToolResultMessage,
) -> None:
    assert serde.dumps(message) == serde.dumps(message, Message)


def test_the_discriminator_picks_the_model() -> None:
    tool: Message = serde.loads(Message, '{"kind": "tool", "tool_call_id": "c", "name": "n", "content": "r"}')
    assert isinstance(tool, ToolResultMessage)
    user: Message = serde.loads(Message, b'{"kind": "user", "content": "hi"}')
    assert isinstance(user, UserMessage)


@pytest.mark.parametrize(
    "text",
    [
        '{"kind": "system", "content": "x"}',
        '{"content": "no kind"}',
        '{"kind": "user", "content": "hi", "surprise": 1}',
        '{"kind": "user"}',
        "not json",
    ],
)
def test_invalid_documents_are_rejected(text: str) -> None:
    with pytest.raises(ValidationError):
        serde.loads(Message, text)


def test_a_session_with_every_message_kind_round_trips() -> None:
    session = Session(
        id="s1",
        workspace_id="w1",
        active_messages=list(MESSAGES),
        summary="earlier: greetings",
        last_compaction=WHEN,
        recent_event_ids=["e1", "e2"],
        version=7,
        created_at=WHEN,
        updated_at=WHEN,
    )
    back: Session = serde.loads(Session, serde.dumps(session))
    assert back == session
    assert [type(m) for m in back.active_messages] == [UserMessage, AssistantMessage, ToolResultMessage]


def test_nested_models_round_trip() -> None:
    inbound = InboundMessage(
        event_id="e1",
        channel="slack",
        workspace_id="w1",
        session_id="s1",
        sender=Sender(id="U1", name="Ada", is_bot=False),
        chat_id="C1",
        chat_type="channel",
        thread_id="171.2",
        text="hello",
        received_at=WHEN,
        reply_context={"response_url": "https://hooks.example/x"},
    )
    item = LaneItem(inbound=inbound, enqueued_at=WHEN)
    assert serde.loads(LaneItem, serde.dumps(item)) == item

    entry = OutboxEntry(
        seq=3,
        message=OutboundMessage(
            workspace_id="w1", session_id="s1", channel="web", chat_id="c", turn_id="t", seq=3, text="x"
        ),
    )
    assert serde.loads(OutboxEntry, serde.dumps(entry)) == entry

    record = MemoryRecord(
        id="r",
        workspace_id="w1",
        session_id="s1",
        role="tool",
        text="t",
        seq=0,
        created_at=WHEN,
        message=MESSAGES[2],
    )
    back: MemoryRecord = serde.loads(MemoryRecord, serde.dumps(record))
    assert back == record and isinstance(back.message, ToolResultMessage)


def test_lists_of_messages_round_trip() -> None:
    text = serde.dumps(MESSAGES, list[Message])
    assert serde.loads(list[Message], text) == MESSAGES


def test_output_is_compact_deterministic_utf8_and_keeps_nones() -> None:
    message = UserMessage(id="m1", content="Grüße 👋", created_at=WHEN)
    text = serde.dumps(message)

    assert text == serde.dumps(UserMessage(id="m1", content="Grüße 👋", created_at=WHEN))
    assert ", " not in text and ": " not in text
    assert "Grüße 👋" in text  # not \\u-escaped
    # Every field is present, None included, so every store writes documents of one shape.
    assert json.loads(text) == {
        "kind": "user",
        "id": "m1",
        "content": "Grüße 👋",
        "images": [],  # the photos' ids (docs/media.md), never their bytes
        "sender_id": None,
        "user_id": None,
        "sender_name": None,
        "event_id": None,
        "created_at": "2025-03-01T12:30:15.123456Z",
    }


def test_datetimes_keep_their_instant_and_offset() -> None:
    plus_two = datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    back: UserMessage = serde.loads(UserMessage, serde.dumps(UserMessage(content="x", created_at=plus_two)))
    assert back.created_at == plus_two
    assert back.created_at.utcoffset() == timedelta(hours=2)


def test_jsonable_round_trip() -> None:
    data = serde.to_jsonable(MESSAGES, list[Message])
    assert isinstance(data, list) and data[1]["tool_calls"][0]["name"] == "search"
    assert json.loads(json.dumps(data)) == data
    assert serde.from_jsonable(list[Message], data) == MESSAGES


def test_jsonable_matches_the_text_form() -> None:
    session = Session(
        id="s1", workspace_id="w1", active_messages=list(MESSAGES), created_at=WHEN, updated_at=WHEN
    )
    assert serde.to_jsonable(session) == json.loads(serde.dumps(session))


def test_the_codec_agrees_with_pydantic() -> None:
    # The codec adds no format of its own: any pydantic reader can read what a store wrote.
    adapter: TypeAdapter[Session] = TypeAdapter(Session)
    session = Session(
        id="s1", workspace_id="w1", active_messages=list(MESSAGES), created_at=WHEN, updated_at=WHEN
    )
    assert adapter.validate_json(serde.dumps(session)) == session


@settings(max_examples=75, deadline=None)
@given(
    content=st.text(),
    arguments=st.text(),
    is_error=st.booleans(),
    seconds=st.integers(min_value=0, max_value=4_000_000_000),
)
def test_any_text_round_trips(content: str, arguments: str, is_error: bool, seconds: int) -> None:
    when = datetime.fromtimestamp(seconds, UTC)
    messages: list[UserMessage | AssistantMessage | ToolResultMessage] = [
        UserMessage(content=content, created_at=when),
        AssistantMessage(
            content=content, tool_calls=[ToolCall(id="c", name="n", arguments=arguments)], created_at=when
        ),
        ToolResultMessage(tool_call_id="c", name="n", content=content, is_error=is_error, created_at=when),
    ]
    assert serde.loads(list[Message], serde.dumps(messages, list[Message])) == messages


def test_an_outbox_entry_and_its_message_carry_one_seq() -> None:
    message = OutboundMessage(
        workspace_id="w1", session_id="s1", channel="web", chat_id="c", turn_id="t", seq=5, text="x"
    )
    with pytest.raises(ValidationError):
        OutboxEntry(seq=6, message=message)
    # An entry stored before messages carried their seq reads back with the entry's seq
    older = json.loads(serde.dumps(OutboxEntry(seq=5, message=message)))
    del older["message"]["seq"]
    older["seq"] = 2
    assert serde.loads(OutboxEntry, json.dumps(older)).message.seq == 2
