"""The session's active window and what rolls out of it (spec 003): where the window is cut, the
Tier-1 records of the messages cut off, their index documents, and the CompactionDue events.

Shared by the turn's commit (shared.agent.commit) and emergency compaction
(shared.agent.emergency), so both roll messages out the same way: the same cut, records with the
same owners (what the right to erasure finds), the same documents and the same batch events.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from shared import correlation
from shared.backend import Backend
from shared.channels.inbound import conversation_key
from shared.memory.scope import is_group
from shared.memory.writer import index_rolled_out, message_scope
from shared.models import (
    AssistantMessage,
    DomainEvent,
    InboundMessage,
    MemoryRecord,
    Message,
    Session,
    UserMessage,
    WorkspaceConfig,
)
from shared.ports import EventBus


@dataclass(frozen=True)
class Origin:
    """Where a session's messages come from, for the scope its Tier-1 records are written with:
    the channel conversation (shared.channels.inbound.conversation_key: a Slack thread's is its
    channel's) and whether several people talk there."""

    conversation: str
    group: bool


def origin_of(inbound: InboundMessage) -> Origin:
    return Origin(conversation_key(inbound.channel, inbound.chat_id), is_group(inbound))


def split_window(messages: Sequence[Message], size: int) -> tuple[list[Message], list[Message]]:
    """(rolled out, kept): about the newest `size` messages, cut so that the window opens on a
    user message.

    Anthropic and Bedrock reject a conversation whose first message is not the user's, and a cut
    inside a turn would leave tool results (or calls) whose other half rolled out. So the cut
    moves forward from the nominal one (`size` messages from the end) to the next user message,
    which keeps whole turns and at most `size` messages. When no user message follows it (the
    newest turn alone is longer than `size`: a long tool chain) the cut moves back to the last
    user message instead, so the turn being answered is never cut: the window then exceeds
    `size` by the rest of that turn, which the tool-call limit bounds. A list holding no user
    message at all (a window stored before this rule) rolls out whole.
    """
    cut = max(0, len(messages) - size)
    users = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    if not users:
        return list(messages), []
    start = next((i for i in users if i >= cut), users[-1])
    return list(messages[:start]), list(messages[start:])


def message_text(m: Message) -> str:
    if isinstance(m, AssistantMessage) and m.tool_calls:
        calls = "\n".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
        return f"{m.content}\n{calls}" if m.content else calls
    return m.content


def tier1_records(session: Session, rolled: Sequence[Message], origin: Origin) -> list[MemoryRecord]:
    """Each message as a Tier-1 record, owned by the user who wrote it or, for a reply or a tool
    result, the user it answered (the last user message before it); the session's owner when the
    rolled run opens on a reply. Each is stamped with its scope (shared.memory.writer.message_scope)
    in `origin`'s conversation."""
    owners: list[str | None] = []
    owner = session.user_id
    for m in rolled:
        if isinstance(m, UserMessage) and m.user_id is not None:
            owner = m.user_id
        owners.append(owner)
    return [
        MemoryRecord(
            id=m.id,
            workspace_id=session.workspace_id,
            session_id=session.id,
            role=m.kind,
            text=message_text(m),
            # Messages roll out oldest first, so seq is the message's position in the session.
            seq=session.rolled_out_count + i,
            created_at=m.created_at,
            message=m,
            user_id=owners[i],
            author=m.sender_name if isinstance(m, UserMessage) else None,
            scope=message_scope(m.kind, owners[i], conversation=origin.conversation, group=origin.group),
        )
        for i, m in enumerate(rolled)
    ]


def index_rolled(
    backend: Backend, session: Session, records: list[MemoryRecord], kept: list[Message], origin: Origin
) -> None:
    """Index the rolled-out records through the memory writer: vectors (Tier 4) when there is an
    embedder, and each message's neighbours as context, the next ones taken from the window."""
    if not records:
        return
    rolled = [r.message for r in records if r.message is not None]
    # Built from rolled + kept together, so a kept reply gets the owner tier1_records gives it.
    following = tier1_records(session, [*rolled, *kept], origin)[len(rolled) :]
    index_rolled_out(backend.index, backend.memory, backend.embedder, records, following)


def announce_compaction(
    events: EventBus, workspace: WorkspaceConfig, before: Session, after: Session, *, log: logging.Logger
) -> None:
    """One CompactionDue per multiple of summary_batch that Tier 1 crossed between `before` and
    `after` (already saved). `log` is the caller's, so a failure is logged where it happened."""
    batch = workspace.summary_batch
    for k in range(before.rolled_out_count // batch + 1, after.rolled_out_count // batch + 1):
        event = DomainEvent(
            type="CompactionDue",
            workspace_id=after.workspace_id,
            session_id=after.id,
            detail={"first_seq": (k - 1) * batch, "last_seq": k * batch - 1},
            correlation_id=correlation.current(),
        )
        try:
            events.publish(event)
        except Exception:
            # The session is already saved, so raising would only make the retry a skipped
            # duplicate; the hourly maintenance run catches up on batches nobody summarised.
            log.exception("CompactionDue not published", extra={"session_id": after.id, "batch": k})
