"""The recorded turns of a session, read from a backend through its ports (never written).

A turn is a user message and what followed it until the next one (the assistant's steps with
their tool calls, the tools' results, the reply), read from the session's Tier-1 records and its
window in position order, and its audit record, found by the user message's event id. The audit
record's TurnTrace (shared.models) gives the inbound's time and conversation; records written
before it existed fall back to the session's channel and the message's time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from shared.backend import Backend
from shared.memory.paging import all_messages
from shared.models import (
    AssistantMessage,
    AuditRecord,
    Channel,
    Message,
    Session,
    ToolResultMessage,
    UserMessage,
)
from shared.replay.report import RESULT_CHARS, ToolCallView, TurnSide

# How many of the workspace's audit records are read to find a session's (newest first).
AUDIT_RECORDS = 100_000
OUTBOX_ENTRIES = 100_000
CHANNELS: tuple[Channel, ...] = ("web", "telegram", "slack", "discord", "whatsapp")
# Outcomes of attempts that did not end the turn: a later record of the same event did.
_ATTEMPTS = {"error", "skipped_duplicate"}
# Text the turn quoted as data (shared.safety.injection.quote_untrusted): a flagged user message,
# whose words the replayed turn is given unquoted (it quotes them again as the original did), and
# every memory tool's result, shown unquoted in the report.
_QUOTED = re.compile(
    r'\A\[Untrusted data from "[^"\n]*"[^\n]*\]\n<<<BEGIN UNTRUSTED DATA (?P<id>[0-9a-f]+)>>>\n'
    r"(?P<text>.*)\n<<<END UNTRUSTED DATA (?P=id)>>>\Z",
    re.S,
)


@dataclass
class RecordedTurn:
    index: int  # from 1, in the session's order
    user: UserMessage
    after: list[Message]  # the messages the turn committed after the user's
    audit: AuditRecord | None
    # What the turn sent where it kept no reply (a budget denial): its outbox parts, web only.
    sent: str = ""

    @property
    def text(self) -> str:
        """The user's words as the replayed turn is given them: as stored (redacted), unquoted."""
        return unquoted(self.user.content)

    @property
    def received_at(self) -> datetime:
        trace = self.audit.trace if self.audit else None
        return trace.received_at if trace and trace.received_at else self.user.created_at


def unquoted(text: str) -> str:
    """The quoted data of `text` when it is one quoted block, else `text`."""
    quoted = _QUOTED.match(text)
    return quoted.group("text") if quoted else text


@dataclass
class RecordedSession:
    session: Session
    turns: list[RecordedTurn] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.session.id

    def channel(self, turn: RecordedTurn) -> Channel:
        trace = turn.audit.trace if turn.audit else None
        channel = (trace.channel if trace else None) or self.session.channel
        return next((c for c in CHANNELS if c == channel), "web")

    def chat(self, turn: RecordedTurn) -> tuple[str, Literal["dm", "group", "channel"], str | None]:
        """(chat id, chat type, thread id) of the turn's conversation."""
        trace = turn.audit.trace if turn.audit else None
        if trace is not None and trace.chat_id is not None:
            return trace.chat_id, trace.chat_type or "dm", trace.thread_id
        # Before traces: the session id names its chat after the channel ("telegram.42").
        _, _, chat = self.session.id.partition(".")
        return chat or self.session.id, "dm", None


def session_messages(backend: Backend, workspace_id: str, session: Session) -> list[Message]:
    """Every message of the session still stored, oldest first: Tier 1, then the window."""
    records = all_messages(backend.memory, workspace_id, session.id)
    found: list[Message] = [r.message for r in records if r.message is not None]
    seen = {m.id for m in found}
    return [*found, *(m for m in session.active_messages if m.id not in seen)]


def group_turns(messages: Sequence[Message]) -> list[tuple[UserMessage, list[Message]]]:
    """Each user message with the messages after it, up to the next one."""
    turns: list[tuple[UserMessage, list[Message]]] = []
    for m in messages:
        if isinstance(m, UserMessage):
            turns.append((m, []))
        elif turns:
            turns[-1][1].append(m)
    return turns


def audit_by_event(records: Sequence[AuditRecord], session_id: str) -> dict[str, AuditRecord]:
    """The record that ended each event's turn in the session: the newest one that is not a
    failed attempt or a skipped redelivery (else the newest one)."""
    chosen: dict[str, AuditRecord] = {}
    for record in sorted(records, key=lambda r: r.created_at):
        if record.session_id != session_id or record.event_id is None:
            continue
        held = chosen.get(record.event_id)
        if held is None or record.outcome not in _ATTEMPTS or held.outcome in _ATTEMPTS:
            chosen[record.event_id] = record
    return chosen


def read_session(
    backend: Backend, workspace_id: str, session: Session, records: Sequence[AuditRecord]
) -> RecordedSession:
    audits = audit_by_event(records, session.id)
    sent = outbox_texts(backend, workspace_id, session.id)
    out = RecordedSession(session)
    for i, (user, after) in enumerate(group_turns(session_messages(backend, workspace_id, session)), start=1):
        audit = audits.get(user.event_id or "")
        out.turns.append(RecordedTurn(i, user, after, audit, sent.get(audit.turn_id, "") if audit else ""))
    return out


def outbox_texts(backend: Backend, workspace_id: str, session_id: str) -> dict[str, str]:
    """The session's outbox by turn: each turn's parts, joined."""
    parts: dict[str, list[str]] = {}
    for entry in backend.outbox.read(workspace_id, session_id, limit=OUTBOX_ENTRIES):
        parts.setdefault(entry.message.turn_id, []).append(entry.message.text)
    return {turn: "\n".join(texts) for turn, texts in parts.items()}


def side_of(messages: Sequence[Message], audit: AuditRecord | None, sent: str = "") -> TurnSide:
    """A turn's answer as the report shows it: from its messages (the reply, the tool calls with
    their results) and its audit record (the model, tokens, cost, duration, outcome)."""
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    calls: list[ToolCallView] = []
    reply = ""
    for m in messages:
        if not isinstance(m, AssistantMessage):
            continue
        for call in m.tool_calls:
            result = results.get(call.id)
            calls.append(
                ToolCallView(
                    name=call.name,
                    arguments=call.arguments,
                    result=unquoted(result.content)[:RESULT_CHARS] if result else None,
                    is_error=result.is_error if result else False,
                )
            )
        if not m.tool_calls:
            reply = m.content
    side = TurnSide(reply=reply or sent, tool_calls=calls)
    if audit is not None:
        side = side.model_copy(
            update={
                "model": audit.model,
                "tokens_in": audit.tokens_in,
                "tokens_out": audit.tokens_out,
                "cost_usd": audit.cost_usd,
                "duration_ms": audit.duration_ms,
                "outcome": audit.outcome,
                "error": audit.error,
            }
        )
    return side
