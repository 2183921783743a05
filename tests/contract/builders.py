"""Small builders of domain objects for the contract suites."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.clock import new_id
from shared.models import (
    AssistantMessage,
    InboundMessage,
    LaneItem,
    MemoryRecord,
    MemoryScope,
    Message,
    Sender,
    Session,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.models.tasks import Task

from .factories import CONTRACT_VECTOR_DIM

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def conversation() -> list[Message]:
    """One message of each kind, with the fields that are easy to lose on the way through a store."""
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Zürich", "unit": "c"}')
    return [
        UserMessage(
            id="m1",
            content="What's the weather in Zürich? 🌦",
            sender_id="u1",
            event_id="e1",
            created_at=at(0),
        ),
        AssistantMessage(
            id="m2", content="", tool_calls=[call], model="openai/gpt-4.1-mini", created_at=at(1)
        ),
        ToolResultMessage(
            id="m3", tool_call_id="call_1", name="get_weather", content="12 °C", created_at=at(2)
        ),
        AssistantMessage(id="m4", content="It is 12 °C.\nBring a jacket.", created_at=at(3)),
        ToolResultMessage(
            id="m5", tool_call_id="call_2", name="search", content="boom", is_error=True, created_at=at(4)
        ),
    ]


def session(workspace_id: str, session_id: str = "s1", **fields: object) -> Session:
    data: dict[str, object] = {
        "id": session_id,
        "workspace_id": workspace_id,
        "user_id": "u1",
        "channel": "telegram",
        "active_messages": conversation(),
        "summary": "The user asked about the weather.",
        "last_compaction": at(-60),
        "model_override": "openai/gpt-4.1",
        "message_count": 5,
        "recent_event_ids": ["e1"],
        "created_at": at(-120),
        "updated_at": at(5),
    }
    data.update(fields)
    return Session.model_validate(data)


def record(workspace_id: str, session_id: str, seq: int, text: str | None = None) -> MemoryRecord:
    messages = conversation()
    message = messages[seq % len(messages)]
    return MemoryRecord(
        id=f"r{seq}-{session_id}",
        workspace_id=workspace_id,
        session_id=session_id,
        role=message.kind,
        text=text if text is not None else f"message number {seq}",
        seq=seq,
        created_at=at(seq),
        message=message,
    )


def user_records(
    workspace_id: str, texts: list[str], *, user_id: str, scope: MemoryScope, session_id: str = "s1"
) -> list[MemoryRecord]:
    """One person's messages in one session, record `r{seq}` a minute apart, seq = position."""
    return [
        MemoryRecord(
            id=f"r{seq}",
            workspace_id=workspace_id,
            session_id=session_id,
            role="user",
            text=text,
            seq=seq,
            created_at=at(seq),
            user_id=user_id,
            scope=scope,
        )
        for seq, text in enumerate(texts)
    ]


def unit_vector(axis: int, *, tilt: float = 0.0, towards: int | None = None) -> list[float]:
    """A unit-ish vector along `axis`, optionally tilted a little towards another axis."""
    vector = [0.0] * CONTRACT_VECTOR_DIM
    vector[axis] = 1.0
    if towards is not None:
        vector[towards] = tilt
    return vector


def lane_item(workspace_id: str, session_id: str, event_id: str | None = None, text: str = "hi") -> LaneItem:
    inbound = InboundMessage(
        event_id=event_id or new_id("ev"),
        channel="telegram",
        workspace_id=workspace_id,
        session_id=session_id,
        sender=Sender(id="u1", name="Ada"),
        chat_id="chat-1",
        text=text,
        reply_context={"message_id": "42"},
    )
    return LaneItem(inbound=inbound)


def task(
    workspace_id: str,
    session_id: str = "s1",
    task_id: str | None = None,
    *,
    created: float = 0,
    **fields: object,
) -> Task:
    """A delegated task of `session_id`, created `created` minutes after T0."""
    data: dict[str, object] = {
        "id": task_id or new_id("task"),
        "workspace_id": workspace_id,
        "session_id": session_id,
        "role": "researcher",
        "brief": "Find what the user said about Zürich, with sources.",
        "parent": lane_item(workspace_id, session_id, text="look into Zürich").inbound,
        "parent_turn_id": "turn-1",
        "created_at": at(created),
        "updated_at": at(created),
        "deadline_at": at(created + 15),
    }
    data.update(fields)
    return Task.model_validate(data)
