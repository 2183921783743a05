"""One agent turn (spec 000): load, prepare, call the model, send, commit (with the audit record).

Failure policy, decided once here:
- The sender is resolved first (shared.identity.resolve_sender). One the workspace does not admit
  (refused, or waiting for an admin to approve their pairing code) gets the policy's reply, if it
  has one, and the turn ends there: no model call, and nothing committed, since theirs is not an
  admitted conversation. The audit record says why ("sender_refused", "pairing_required"). The
  reply goes out once however often the event is redelivered: the outbox and the platforms'
  send ledger are keyed by the turn, which is derived from the event.
- Tools run inside the turn (shared.agent.loop): every new message (the user's, each assistant
  step with its tool calls, the results, the reply) is committed together, and a turn stopped by
  the workspace's tool-call limit replies with the reason and is committed as "limited". A tool
  failure is a result the model reads, never an error of the turn. A provider error after some
  tools ran retries the whole turn, tools included: a tool with side effects keys them on the
  ToolContext's turn_id (idempotent per event, like the reply).
- No model configured: the user is told how to configure one (the ModelNotConfigured text), their
  message is kept in the session, and the turn ends "model_not_configured". Retrying can't help.
- The provider fails after the SDK's own retries (ProviderError): the attempt is audited as
  "error" and the error is raised, so the lane retries the item and dead-letters it after its last
  attempt; the dead-letter path calls `give_up_turn` to tell the user. Nothing is committed by a
  failed attempt, and the turn id is derived from the event, so a retry that succeeds posts once.
- The reply is sent before the commit: a crash in between re-runs the turn, which asks for the
  same outbox position (reply_seq: the session's message count is unchanged until the commit),
  and the outbox, for which that position is the send ledger, drops the second post.
- The commit is one SessionStore.save: the session, the Tier-1 records rolled out of the window
  and the turn's audit record land together or not at all (one DynamoDB transaction in the cloud).
  With the workspace config and the sender's identity cached (shared.workspace_cache,
  shared.identity.CachedIdentities), a warm turn makes three DynamoDB round trips: the session's
  GetItem, the reply's PutItem and the commit's TransactWriteItems.
- A budget (shared.budgets.TurnBudget, docs/budgets.md) adds no round trip: its counters are read
  with the session (a BatchGetItem instead of the GetItem), checked before each model call against
  what was read plus what the turn spent since, and the spending is added to them in the commit's
  transaction. An attempt that does not commit records its spending on its own.
- A redelivered event whose turn already committed is skipped ("skipped_duplicate"). SQS FIFO
  drops a duplicate only within 5 minutes of the first send, and platforms retry later than that
  (Slack's last retry; Telegram re-sending updates after the webhook failed for a while), so the
  session keeps the event ids of its last day of turns (EVENT_ID_TTL, at most
  MAX_RECENT_EVENT_IDS) with their commit times: a few hundred bytes for a conversation at an
  ordinary pace. Checking the session is enough: an event always maps to the same session, so its
  deliveries queue in one lane and run one after the other, and the later one finds the id in the
  session it loads. Deliveries that overlap all the same (a visibility timeout running out
  mid-turn) meet at the commit, whose version condition lets one through and sends the other
  back to a session that now holds the id.
- Safety (docs/safety.md): the user's message is scanned and redacted (and quoted as data if
  flagged) in `_user_message`, so every path and retry stores the same text; the system prompt
  explains the quoting; tool results and the model's output are filtered in shared.agent.loop; the
  stream into the channel passes a StreamRedactor. So the channel, the session, Tier 1 and the
  index only ever get redacted text. What the filters found (rule and kind names, counts) goes on
  the turn's log line, never the text.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from shared.agent.context import assemble_system_prompt
from shared.agent.loop import (
    EMPTY_REPLY,  # noqa: F401 -- re-exported: part of what a turn replies
    LoopResult,
    Safety,
    run_loop,
)
from shared.backend import Backend
from shared.budgets import BudgetDecision, PriceTable, TurnBudget
from shared.channels.out import Reply, progressive_reply
from shared.channels.senders import SenderRegistry
from shared.clock import utcnow
from shared.config import Settings
from shared.consolidation.emergency import with_emergency_compaction
from shared.errors import ConcurrencyConflict, ModelNotConfigured, ProviderError
from shared.identity import Resolution, resolve_sender
from shared.memory.writer import index_rolled_out
from shared.models import (
    AssistantMessage,
    AuditRecord,
    DomainEvent,
    InboundMessage,
    LaneItem,
    MemoryRecord,
    Message,
    OutboundMessage,
    Session,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.ports import EventBus, SessionStore
from shared.providers.base import ChatRequest, Provider, ToolSpec, Usage
from shared.safety.redact import StreamRedactor
from shared.skills import Skill, select_skills
from shared.tools import ToolContext, ToolRegistry
from shared.tools.builtin import agent_registry

log = logging.getLogger("sigil.turn")

# How long a committed event id is remembered: past every platform's redelivery (see the module
# docstring), and past SQS FIFO's 5-minute deduplication window by far.
EVENT_ID_TTL = timedelta(hours=24)
# A bound on the session item whatever the pace: 500 turns within a day is a busy group channel,
# whose retries (minutes or hours late) are still among its last 500 events.
MAX_RECENT_EVENT_IDS = 500
PARTS_PER_TURN = 100  # outbox positions a turn's reply may take (see reply_seq)
COMMIT_ATTEMPTS = 5
APOLOGY = "Sorry, I couldn't reach the model just now. Please send your message again in a moment."

Outcome = Literal[
    "ok",
    "error",
    "limited",  # the workspace's tool-call limit ended the turn
    "skipped_duplicate",
    "model_not_configured",
    "pairing_required",
    "sender_refused",
    "budget_denied",  # a workspace or user budget ran out (before the turn, or between its calls)
]
ProviderFactory = Callable[[str | None], tuple[Provider, str]]


@dataclass
class TurnDeps:
    backend: Backend
    settings: Settings
    senders: SenderRegistry
    provider_factory: ProviderFactory  # model ref ("openai/gpt-4.1-mini" or None) → (provider, model)
    clock: Callable[[], datetime] = utcnow  # commit times, event-id expiry, identity timestamps
    # Offered to the model on every turn; what a workspace may run is checked per call.
    tools: ToolRegistry = field(default_factory=agent_registry)  # built-ins and memory tools
    prices: PriceTable = field(default_factory=PriceTable)  # model ref -> USD per 1M tokens
    # Tier-3 facts about the sender for the prompt's small fact budget (shared.memory.tacit).
    facts: Callable[[str, str], Sequence[Triple]] | None = None
    # A workspace's skills (shared.skills); the local gateway loads <data_dir>/workspaces/<ws>/skills.
    skills: Callable[[str], list[Skill]] = lambda workspace_id: []


def run_turn(deps: TurnDeps, item: LaneItem) -> AuditRecord:
    started = time.monotonic()
    inbound, turn = item.inbound, turn_id_for(item)
    workspace = deps.backend.workspaces.get(inbound.workspace_id) or WorkspaceConfig(id=inbound.workspace_id)
    sender = resolve_sender(deps.backend.identities, workspace, inbound, now=deps.clock())
    budget = TurnBudget(
        deps.backend.budgets, inbound.workspace_id, sender.user_id, workspace.budget, deps.prices, deps.clock
    )
    # An admitted sender's budget counters are read with the session, in the same request.
    session = _load_session(
        deps.backend.sessions, inbound, sender.user_id, budget=budget if sender.admitted else None
    )
    if inbound.event_id in session.recent_event_ids:
        return _audit(deps, item, started, "skipped_duplicate", user_id=sender.user_id)
    if not sender.admitted:
        return _turn_away(deps, item, session, sender, started)
    safety = Safety(pii=workspace.pii_redaction)
    user = _user_message(inbound, turn, safety, sender.user_id)
    try:
        provider, model = deps.provider_factory(session.model_override or workspace.model)
    except ModelNotConfigured as exc:
        _send(deps, inbound, session, turn, exc.message)
        record = _audit_record(
            item, started, "model_not_configured", user_id=sender.user_id, error=exc.message
        )
        _commit(deps, workspace, session, inbound, [user], audit=record)
        return _log_turn(record, safety)
    model_ref = f"{provider.name}/{model}"
    if (denied := budget.check()).exhausted is not None:
        return _over_budget(
            deps,
            item,
            workspace=workspace,
            session=session,
            user=user,
            user_id=sender.user_id,
            decision=denied,
            started=started,
            safety=safety,
        )
    _, window = split_window(session.active_messages, workspace.active_window)
    tools = deps.tools.specs()
    request = ChatRequest(
        model=model,
        system=system_prompt(deps, workspace, session, inbound, tools, user_id=sender.user_id),
        messages=[*window, user],
        tools=tools,
    )
    ctx = _tool_context(deps, inbound, sender.user_id, turn)
    # Streamed into the channel as it comes, where the channel can edit a message (Telegram,
    # Slack, Discord); the web outbox and WhatsApp get the final text once.
    shown = progressive_reply(deps.senders.get(inbound.channel), _outbound(inbound, session, turn, ""))
    try:
        # A context overflow rolls more of the window into Tier 1 and calls again (10, 3, then 1
        # message kept): shared.consolidation.emergency. The session it saves is the one to commit.
        result, session = with_emergency_compaction(
            deps.backend,
            workspace,
            session,
            request,
            lambda request: run_loop(
                provider,
                request,
                deps.tools,
                ctx,
                workspace,
                on_text=_redacted(shown, safety),
                safety=safety,
                budget=budget,
            ),
        )
        shown.finish(result.reply.content)  # redacted by the loop, as is everything it commits
        record = _audit_record(
            item, started, result.outcome, user_id=sender.user_id, model=model_ref, loop=result, budget=budget
        )
        _commit(
            deps,
            workspace,
            session,
            inbound,
            [user, *result.messages],
            audit=record,
            updates=ctx.session_updates,
            budget=budget,
        )
    except ProviderError as exc:
        _audit(deps, item, started, "error", user_id=sender.user_id, model=model_ref, error=exc.message)
        raise
    finally:
        # The spending rides on the commit; an attempt that did not commit (a provider error
        # after some calls, a failed send or save, a redelivery that committed first) records
        # what it spent on its own: the tokens were spent all the same.
        _settle(budget)
    return _log_turn(record, safety)


def give_up_turn(deps: TurnDeps, item: LaneItem) -> None:
    """For the lane, when it dead-letters an item: apologise once and keep what the user said."""
    inbound, turn = item.inbound, turn_id_for(item)
    workspace = deps.backend.workspaces.get(inbound.workspace_id) or WorkspaceConfig(id=inbound.workspace_id)
    sender = resolve_sender(deps.backend.identities, workspace, inbound, now=deps.clock())
    if not sender.admitted:
        # What failed was the policy's reply; a sender not admitted has nothing kept, apology
        # included.
        return
    session = _load_session(deps.backend.sessions, inbound, sender.user_id)
    if inbound.event_id in session.recent_event_ids:
        return
    # The failed attempts sent nothing (a provider error comes before the send), so the apology
    # takes the reply's position; had one of them sent, the user has the reply and the outbox
    # drops the apology as that part, sent again.
    _send(deps, inbound, session, turn, APOLOGY)
    user = _user_message(inbound, turn, Safety(pii=workspace.pii_redaction), sender.user_id)
    _commit(deps, workspace, session, inbound, [user])


def reply_seq(message_count: int, part: int = 0) -> int:
    """The outbox position of a reply part, from the session's message count at the turn's start.

    The count is the same on every retry of a turn (it moves only when the turn commits) and
    larger for each later turn of the session (every commit appends at least the user's message,
    and the lane runs a session's turns one at a time). So a turn's parts have positions no other
    turn asks for, in order, and a retry asks for the same ones: the outbox needs no counter.
    Positions are not contiguous; readers page with `after`.
    """
    if not 0 <= part < PARTS_PER_TURN:
        raise ValueError(f"a reply has at most {PARTS_PER_TURN} parts, not part {part}")
    return message_count * PARTS_PER_TURN + part + 1


def recent_events(
    session: Session, event_id: str, now: datetime, *, merged: Sequence[str] = ()
) -> tuple[list[str], list[int]]:
    """The session's event ids and times with `event_id` (and a coalesced burst's `merged` ids)
    added at `now`: those of the last EVENT_ID_TTL, the newest MAX_RECENT_EVENT_IDS of them,
    oldest first."""
    at = int(now.timestamp())
    horizon = at - int(EVENT_ID_TTL.total_seconds())
    seen = zip(session.recent_event_ids, session.recent_event_times, strict=True)
    new = [(e, at) for e in (*merged, event_id)]
    kept = [*((e, t) for e, t in seen if t >= horizon), *new][-MAX_RECENT_EVENT_IDS:]
    return [e for e, _ in kept], [t for _, t in kept]


def turn_id_for(item: LaneItem) -> str:
    """Deterministic per event, so every retry of a turn writes to the same send-ledger keys."""
    i = item.inbound
    key = f"{i.workspace_id}\n{i.session_id}\n{i.channel}\n{i.event_id}"
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


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


# ---------------------------------------------------------------- steps


def _load_session(
    store: SessionStore, inbound: InboundMessage, user_id: str, *, budget: TurnBudget | None = None
) -> Session:
    """The stored session, or a new one belonging to `user_id` (the Sigil user who opened it).
    With a `budget` that limits something, its counters are read in the same request and seeded."""
    counters = budget.counters_to_read if budget is not None else []
    if budget is not None and counters:
        found, totals = store.get_with_budget(inbound.workspace_id, inbound.session_id, counters)
        budget.seed(totals)
    else:
        found = store.get(inbound.workspace_id, inbound.session_id)
    if found is not None:
        return found
    return Session(
        id=inbound.session_id,
        workspace_id=inbound.workspace_id,
        user_id=user_id,
        channel=inbound.channel,
    )


def _over_budget(
    deps: TurnDeps,
    item: LaneItem,
    *,
    workspace: WorkspaceConfig,
    session: Session,
    user: UserMessage,
    user_id: str,
    decision: BudgetDecision,
    started: float,
    safety: Safety,
) -> AuditRecord:
    """A budget ran out before the turn: say what and when it resets; no model call. The user's
    message is kept (it was said), the denial is not (it is the gateway's, not the model's)."""
    assert decision.exhausted is not None
    _send(deps, item.inbound, session, turn_id_for(item), decision.exhausted.message(decision.at))
    record = _audit_record(item, started, "budget_denied", user_id=user_id, error=decision.exhausted.summary)
    _commit(deps, workspace, session, item.inbound, [user], audit=record)
    return _log_turn(record, safety)


def _turn_away(
    deps: TurnDeps, item: LaneItem, session: Session, sender: Resolution, started: float
) -> AuditRecord:
    """A sender the workspace does not admit: the policy's reply if it has one (a pairing code, a
    refusal; nothing to a blocked sender or a bot), no model call, nothing kept in the session."""
    if sender.reply is not None:
        _send(deps, item.inbound, session, turn_id_for(item), sender.reply)
    outcome: Outcome = "pairing_required" if sender.admission == "pairing_required" else "sender_refused"
    return _audit(deps, item, started, outcome, user_id=sender.user_id, error=sender.reason)


def _user_message(inbound: InboundMessage, turn: str, safety: Safety, user_id: str | None) -> UserMessage:
    """The user's message as the model sees it and the session keeps it: redacted, and quoted as
    data if the scan flags it. The same on every path and retry (the quoting is deterministic)."""
    # Ids derived from the turn: a retried turn writes the same message, never a second copy.
    content = safety.guard(inbound.text, source="the user")
    return UserMessage(
        id=f"{turn}.u",
        content=content,
        sender_id=inbound.sender.id,
        user_id=user_id,
        sender_name=inbound.sender.name,
        event_id=inbound.event_id,
    )


def system_prompt(
    deps: TurnDeps,
    workspace: WorkspaceConfig,
    session: Session,
    inbound: InboundMessage,
    tools: list[ToolSpec],
    *,
    user_id: str,
) -> str:
    """The turn's system prompt (shared.agent.context, docs/context.md): the workspace's prompt,
    the skills this message selects, the tools, the sender's tacit facts, the channel's hints, the
    time, the rolling summary and, last, the note that tells the model what a quoted block is.
    `user_id` is the sender's Sigil user (in a group session, not necessarily who opened it)."""
    return assemble_system_prompt(
        workspace,
        skills=select_skills(deps.skills(workspace.id), inbound.text),
        tools=tools,
        facts=deps.facts(workspace.id, user_id) if deps.facts is not None else (),
        channel=inbound.channel,
        now=deps.clock(),
        active_task=session.active_task,
        summary=session.summary,
    ).text


def _redacted(shown: Reply, safety: Safety) -> Callable[[str], None]:
    """The stream's text for the channel: redacted, less a tail that could be half a secret.
    The redactor starts over when the loop's next model call streams from the beginning."""
    visible = StreamRedactor(pii=safety.pii)

    def update(text_so_far: str) -> None:
        if text := visible(text_so_far):
            shown.update(text)

    return update


def _tool_context(deps: TurnDeps, inbound: InboundMessage, user_id: str, turn: str) -> ToolContext:
    # The workspace and session a tool acts in are the inbound's, never anything the model wrote.
    return ToolContext(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        user_id=user_id,
        turn_id=turn,
        backend=deps.backend,
        now=deps.clock,
    )


def _send(deps: TurnDeps, inbound: InboundMessage, session: Session, turn: str, text: str) -> None:
    deps.senders.get(inbound.channel).send(_outbound(inbound, session, turn, text))


def _outbound(inbound: InboundMessage, session: Session, turn: str, text: str) -> OutboundMessage:
    return OutboundMessage(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        channel=inbound.channel,
        chat_id=inbound.chat_id,
        thread_id=inbound.thread_id,
        turn_id=turn,
        part=0,
        # `session` is as loaded at the turn's start, so a retry computes the same seq.
        seq=reply_seq(session.message_count, 0),
        text=text,
        in_reply_to=inbound.event_id,
        reply_context=inbound.reply_context,
    )


def _commit(
    deps: TurnDeps,
    workspace: WorkspaceConfig,
    session: Session,
    inbound: InboundMessage,
    new: list[Message],
    *,
    audit: AuditRecord | None = None,
    updates: dict[str, Any] | None = None,
    budget: TurnBudget | None = None,
) -> Session:
    """Append to the window and save (optimistically), with the overflow's Tier-1 records and
    `audit` in the same write; the overflow goes to the index first. `updates` are the session
    changes the turn's tools asked for (ToolContext.session_updates, e.g. the active-task pin).
    What `budget` spent is added to its counters in that write too."""
    for _ in range(COMMIT_ATTEMPTS):
        rolled, kept = split_window([*session.active_messages, *new], workspace.active_window)
        records = _tier1_records(session, rolled)
        # The index is another store, outside the save's transaction, so it goes first: a crash
        # before the save leaves documents the retry rewrites in place (ids are message ids),
        # whereas the reverse order could leave Tier-1 records that search never finds.
        _index(deps.backend, session, records, kept)
        now = deps.clock()
        event_ids, event_times = recent_events(
            session, inbound.event_id, now, merged=inbound.merged_event_ids
        )
        updated = session.model_copy(
            update={
                "active_messages": kept,
                "message_count": session.message_count + len(new),
                "rolled_out_count": session.rolled_out_count + len(rolled),
                "recent_event_ids": event_ids,
                "recent_event_times": event_times,
                "updated_at": now,
                **(updates or {}),
            }
        )
        try:
            saved = deps.backend.sessions.save(
                updated,
                expected_version=session.version,
                archive=records,
                audit=audit,
                charge=budget.pending() if budget is not None else None,
            )
        except ConcurrencyConflict:
            session = _load_session(deps.backend.sessions, inbound, session.user_id or inbound.sender.id)
            if inbound.event_id in session.recent_event_ids:
                # Another delivery of this same turn committed first, with its own audit record:
                # this one's is not written, so the turn is counted once.
                return session
            continue
        if budget is not None:
            budget.recorded()
        _announce_compaction(deps.backend.events, workspace, session, saved)
        return saved
    raise ConcurrencyConflict(
        f"session {inbound.session_id} kept changing under the commit; gave up after {COMMIT_ATTEMPTS} tries"
    )


def _settle(budget: TurnBudget) -> None:
    """Record what the turn spent if its commit did not (a no-op once it did, or with nothing
    spent). Called on the way out of a failure too, so its own failure is logged, not raised."""
    try:
        budget.settle()
    except Exception:
        log.exception(
            "budget spending not recorded",
            extra={"workspace_id": budget.workspace_id, "tokens": budget.spent.tokens},
        )


def _tier1_records(session: Session, rolled: list[Message]) -> list[MemoryRecord]:
    """Each message as a Tier-1 record, owned by the user who wrote it or, for a reply or a tool
    result, the user it answered (the last user message before it); the session's owner when the
    rolled run opens on a reply."""
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
        )
        for i, m in enumerate(rolled)
    ]


def _index(backend: Backend, session: Session, records: list[MemoryRecord], kept: list[Message]) -> None:
    """Index the rolled-out records through the memory writer: vectors (Tier 4) when there is an
    embedder, and each message's neighbours as context, the next ones taken from the window."""
    if not records:
        return
    rolled = [r.message for r in records if r.message is not None]
    # Built from rolled + kept together, so a kept reply gets the owner _tier1_records gives it.
    following = _tier1_records(session, [*rolled, *kept])[len(rolled) :]
    index_rolled_out(backend.index, backend.memory, backend.embedder, records, following)


def _announce_compaction(
    events: EventBus, workspace: WorkspaceConfig, before: Session, after: Session
) -> None:
    """One CompactionDue per multiple of summary_batch that Tier 1 crossed in this commit."""
    batch = workspace.summary_batch
    for k in range(before.rolled_out_count // batch + 1, after.rolled_out_count // batch + 1):
        event = DomainEvent(
            type="CompactionDue",
            workspace_id=after.workspace_id,
            session_id=after.id,
            detail={"first_seq": (k - 1) * batch, "last_seq": k * batch - 1},
        )
        try:
            events.publish(event)
        except Exception:
            # The session is already saved, so raising would only make the retry a skipped
            # duplicate; the hourly maintenance run catches up on batches nobody summarised.
            log.exception("CompactionDue not published", extra={"session_id": after.id, "batch": k})


def _audit(
    deps: TurnDeps,
    item: LaneItem,
    started: float,
    outcome: Outcome,
    *,
    user_id: str,
    model: str | None = None,
    error: str | None = None,
) -> AuditRecord:
    """Audit a turn that commits nothing (a skipped duplicate, a sender turned away, a failed
    attempt) on its own."""
    record = _audit_record(item, started, outcome, user_id=user_id, model=model, error=error)
    deps.backend.audit.append(record)
    return _log_turn(record)


def _audit_record(
    item: LaneItem,
    started: float,
    outcome: Outcome,
    *,
    user_id: str,
    model: str | None = None,
    loop: LoopResult | None = None,
    budget: TurnBudget | None = None,
    error: str | None = None,
) -> AuditRecord:
    # A committing turn's record travels in its commit, so its duration stops short of the save.
    # `user_id` is the Sigil user the sender resolved to (for a refused sender, who they claim to be).
    inbound, usage = item.inbound, loop.usage if loop else Usage()
    if loop and loop.stopped:
        error = loop.stopped.message
    if loop and loop.budget_denied:
        error = loop.budget_denied
    return AuditRecord(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        user_id=user_id,
        event_id=inbound.event_id,
        turn_id=turn_id_for(item),
        model=model,
        tools_used=loop.tools_used if loop else [],
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        duration_ms=round((time.monotonic() - started) * 1000, 3),
        cost_usd=float(budget.spent.usd) if budget else 0.0,
        outcome=outcome,
        error=error,
    )


def _log_turn(record: AuditRecord, safety: Safety | None = None) -> AuditRecord:
    # One line per turn, never the message text: logs outlive the memory retention rules. The
    # safety findings ride on it (AuditRecord has no field for them): rule and kind names, counts.
    findings = {
        "injection_rules": safety.findings if safety else {},
        "quoted": safety.quoted if safety else [],
        "redacted": dict(safety.redacted) if safety else {},
    }
    log.log(
        # A limited turn is worth a look too: a model that loops on tools, or a limit set too low.
        logging.WARNING if record.outcome in {"error", "limited"} else logging.INFO,
        "turn",
        extra={
            "workspace_id": record.workspace_id,
            "session_id": record.session_id,
            "event_id": record.event_id,
            "turn_id": record.turn_id,
            "outcome": record.outcome,
            "model": record.model,
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "tool_calls": len(record.tools_used),
            "duration_ms": record.duration_ms,
            **findings,
        },
    )
    return record
