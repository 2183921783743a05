"""One agent turn (spec 000): load, prepare, call the model, send, commit (with the audit record).

The turn is a pre-flight (shared.agent.preflight: `admit` answers Proceed or Stop), the model
call for a turn that proceeds (shared.agent.loop, inside shared.agent.emergency), and one ending
for both: send, then commit with the audit record (shared.agent.commit, shared.agent.audit), or
append the record alone when nothing is kept. The window and its roll-out are
shared.agent.window; the reply's outbox position and stream are shared.agent.reply.

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
  attempt; the dead-letter path calls `give_up_turn` to tell the user, and audits "given_up" (with
  a note when the apology could not be sent either). Nothing is committed by a failed attempt,
  and the turn id is derived from the event, so a retry that succeeds posts once.
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
  flagged) in shared.agent.preflight.user_message, so every path and retry stores the same text;
  the system prompt explains the quoting; tool results and the model's output are filtered in
  shared.agent.loop; the stream into the channel passes a StreamRedactor. So the channel, the
  session, Tier 1 and the index only ever get redacted text. What the filters found (rule and
  kind names, counts) goes on the turn's log line, never the text.
- Memory (docs/privacy.md): the turn builds its RecallScope once (`recall_scope_for`) from the
  workspace's memory policy, the conversation and the sender, and every memory read of the turn
  (the tools, the prompt's tacit facts) passes it; its records are written with their
  MemoryScope (shared.agent.window). Under the personal policy a direct conversation recalls the
  sender's own records under every id they wrote as (shared.identity.user_aliases), read once a
  minute per workspace and process (shared.identity.UserAliases): a warm turn adds no round trip.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from shared.agent.audit import Outcome, audit_alone, audit_record, log_turn, with_trace
from shared.agent.commit import commit, settle
from shared.agent.context import AssembledContext, assemble_system_prompt, estimate
from shared.agent.emergency import with_emergency_compaction
from shared.agent.loop import LoopResult, Safety, run_loop
from shared.agent.media import fetch_media, noted
from shared.agent.nudge import memory_nudge
from shared.agent.orientation import needs_orientation, orientation_document
from shared.agent.pipeline import Selection, memory_searcher, select_context
from shared.agent.preflight import (
    Command,
    Proceed,
    ProviderFactory,
    Stop,
    Turn,
    admit,
    kept_message,
    load_session,
    open_turn,
    resolve,
    turn_id_for,
    user_message,
)
from shared.agent.reply import outbound, redacted, send
from shared.agent.steps import DurableSteps, first_delivery
from shared.agent.window import origin_of, split_window
from shared.backend import Backend
from shared.budgets import PriceTable, TurnBudget
from shared.channels.inbound import conversation_key
from shared.channels.out import ChannelError, progressive_reply
from shared.channels.senders import SenderRegistry
from shared.clock import utcnow
from shared.config import Settings
from shared.deadline import before, current, deadline, remaining
from shared.errors import ProviderError, SigilError
from shared.identity import aliases_of
from shared.media.content import MediaDeps, MediaInputs, media_inputs, stored_items
from shared.media.fetch import MediaFetcher
from shared.memory.scope import is_group, owner_scope, recall_scope
from shared.memory.writer import MemoryWriter
from shared.models import (
    AuditRecord,
    InboundMessage,
    LaneItem,
    MemoryScope,
    Message,
    RecallScope,
    Session,
    Triple,
    WorkspaceConfig,
)
from shared.ports import Transcriber
from shared.providers.base import ChatRequest, ToolSpec
from shared.skills import Skill, available_skills, catalogue, select_skills
from shared.tools import Tool, ToolContext, ToolRegistry
from shared.tools.builtin import agent_registry
from shared.tools.memory import MEMORY_TOOLS

if TYPE_CHECKING:
    from shared.agent.gate import Gated

# Any of these in the last turns means the agent minds its memory: no nudge (shared.agent.nudge).
MEMORY_TOOL_NAMES = frozenset(t.name for t in MEMORY_TOOLS)

APOLOGY = "Sorry, I couldn't reach the model just now. Please send your message again in a moment."
# What a turn keeps of its deadline for recording an attempt that failed (its audit record, its
# spending): every call of the turn's work, the model's, the embedder's, the index's, the stores'
# and the channel's, ends before (shared.deadline).
BOOKKEEPING_S = 1.0
# The note on a given-up turn's audit record when the apology itself could not be sent.
UNDELIVERED = "the apology could not be delivered"

log = logging.getLogger("sigil.turn")


class TaskSteps(Protocol):
    """Delegated tasks' items (shared.tasks.runner): a composition root that offers the delegate
    tool sets it, and the lanes' items for a task reach it through run_turn and give_up_turn."""

    def run(self, deps: TurnDeps, item: LaneItem) -> AuditRecord:
        """A task's step (TaskEvent kind "step"): the task's next model and tool calls."""
        ...

    def give_up(self, deps: TurnDeps, item: LaneItem, last_error: str | None) -> AuditRecord | None:
        """A step dead-lettered on its last delivery: the task fails and its outcome is told."""
        ...

    def told(self, deps: TurnDeps, item: LaneItem) -> None:
        """The parent's turn for a task's outcome has run: the outcome is delivered."""
        ...

    def note(self, deps: TurnDeps, workspace: WorkspaceConfig, inbound: InboundMessage) -> str:
        """What the system prompt says of the session's tasks waiting for the user ("" for none)."""
        ...


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
    # Tier-3 facts about the sender for the prompt's small fact budget (shared.memory.tacit):
    # (workspace id, user id, the turn's RecallScope) -> facts.
    facts: Callable[[str, str, RecallScope], Sequence[Triple]] | None = None
    # The sender's learned personality directive (shared.memory.personality.LearnedPersonality,
    # cached a minute): (workspace id, user id, the turn's RecallScope) -> text, "" for none.
    personality: Callable[[str, str, RecallScope], str] | None = None
    # The skills a turn of a workspace may use (docs/skills.md); None: shared.skills.available_skills
    # over backend.skills (the cloud agent's is cached for a minute, shared.skills.CachedSkills).
    skills: Callable[[WorkspaceConfig], list[Skill]] | None = None
    # Tools of the workspace's own, added to `tools` for its turns: its MCP servers' exposed tools
    # (shared.tools.mcp.McpToolbox). None: none.
    workspace_tools: Callable[[WorkspaceConfig], Sequence[Tool[Any]]] | None = None
    # Voice notes to text (shared.providers.transcription); None: a voice note is a note saying so.
    transcriber: Transcriber | None = None
    # Fetches a turn's attachments into backend.media (shared.media.fetch): one HTTP pool.
    media_fetcher: MediaFetcher = field(default_factory=MediaFetcher)
    # Delegated tasks (shared.tasks): None where the root offers no delegate tool.
    task_steps: TaskSteps | None = None


@dataclass(frozen=True)
class _Ending:
    """How a turn ends: its audit record, and what it keeps (None: nothing, the record goes alone)."""

    record: AuditRecord
    new: list[Message] | None
    updates: dict[str, Any] = field(default_factory=dict)  # the tools' session changes
    fresh: bool = False  # roll the whole window into memory (the /new command)
    resumed: bool = False  # it saved (or resumed from) durable steps, to clear after the commit


def run_turn(deps: TurnDeps, item: LaneItem) -> AuditRecord:
    if item.task is not None and item.task.kind == "step":
        # A task's step on its own lane: not a turn of the conversation (shared.tasks.runner).
        if deps.task_steps is None:
            raise SigilError("a task's step reached an agent that runs no tasks")
        return deps.task_steps.run(deps, item)
    record = _run_turn(deps, item)
    if item.task is not None and item.task.kind == "outcome" and deps.task_steps is not None:
        deps.task_steps.told(deps, item)
    return record


def _run_turn(deps: TurnDeps, item: LaneItem) -> AuditRecord:
    started = time.monotonic()
    # The work ends a little before the deadline in scope (the caller's), so that an attempt it
    # cuts is still audited, and its spending settled, by that deadline.
    work = work_deadline(current())
    with deadline(work):
        turn = open_turn(deps.backend, item, prices=deps.prices, clock=deps.clock)
        step = admit(turn, deps.provider_factory)
    try:
        with deadline(work):
            match step:
                case Stop():
                    end = _stop(deps, turn, step, started)
                case Proceed():
                    # The attachments, now that the sender is admitted (docs/media.md).
                    step = fetch_media(deps, turn, step)
                    end = _answer(deps, turn, step, started)
                case Command():
                    end = _command(deps, turn, step, started)
            # Where its messages land and what it answered: what a replay of the turn needs.
            record = with_trace(end.record, turn.inbound, turn.session, end.new)
            if end.new is None:
                return audit_alone(deps.backend.audit, record)
            commit(
                deps.backend,
                turn.workspace,
                turn.session,
                turn.inbound,
                end.new,
                clock=deps.clock,
                audit=record,
                updates=end.updates,
                budget=turn.budget,
                fresh=end.fresh,
            )
            if isinstance(step, Proceed) and deps.backend.steps is not None and end.resumed:
                # Committed: the steps that would have resumed it are done with.
                deps.backend.steps.clear(turn.workspace.id, turn.id)
    except ProviderError as exc:
        # A failed model call (or an embedding for the commit's index) commits nothing: the
        # attempt is audited on its own and the lane retries the item.
        if isinstance(step, Proceed):
            audit_alone(deps.backend.audit, _record(turn, started, "error", step, error=exc.message))
        raise
    finally:
        # The spending rides on the commit; an attempt that did not commit (a provider error
        # after some calls, a failed send or save, a redelivery that committed first) records
        # what it spent on its own: the tokens were spent all the same.
        settle(turn.budget)
    return log_turn(record, turn.safety)


def work_deadline(at: float | None) -> float | None:
    """When a turn's work must end for it to be over by `at`: BOOKKEEPING_S before it, or a
    quarter of the time left when that is shorter (a short deadline is mostly the work's)."""
    left = remaining(at)
    if left is None:
        return None
    return before(at, min(BOOKKEEPING_S, max(0.0, left) / 4))


def give_up_turn(deps: TurnDeps, item: LaneItem, *, last_error: str | None = None) -> AuditRecord | None:
    """For the lane, when it dead-letters an item: apologise once, keep what the user said, and
    audit the turn as "given_up". None when there was nothing to do (a sender not admitted, a turn
    already committed).

    The apology must survive the failure that dead-lettered the item, which is often the platform
    itself (no route to it, a revoked token): a ChannelError from its send is one line in the log
    and a note on the audit record (UNDELIVERED), and the user's message is committed all the same,
    so the lane dead-letters the item normally and goes on to the next.

    `last_error` (the lane's, when it has one) is noted on the audit record too: the SQS
    dead-letter queue keeps no reason, and `sigil dlq` finds it there (docs/dead-letters.md).
    """
    if item.task is not None and item.task.kind == "step":
        return deps.task_steps.give_up(deps, item, last_error) if deps.task_steps else None
    started = time.monotonic()
    inbound, turn = item.inbound, turn_id_for(item)
    workspace, sender = resolve(deps.backend, inbound, deps.clock())
    if not sender.admitted:
        # What failed was the policy's reply; a sender not admitted has nothing kept, apology
        # included.
        return None
    session = load_session(deps.backend.sessions, inbound, sender.user_id)
    if inbound.event_id in session.recent_event_ids:
        return None
    # The failed attempts sent nothing (a provider error comes before the send), so the apology
    # takes the reply's position; had one of them sent, the user has the reply and the outbox
    # drops the apology as that part, sent again.
    undelivered = None
    try:
        send(deps.senders, inbound, session, turn, APOLOGY)
    except ChannelError as exc:
        # No traceback: the cause is the platform's, already logged with the attempts that failed.
        undelivered = f"{UNDELIVERED}: {exc.message}"
        log.warning(
            "apology not delivered",
            extra={
                "workspace_id": inbound.workspace_id,
                "session_id": inbound.session_id,
                "event_id": inbound.event_id,
                "platform": exc.platform,
                "code": exc.code,
            },
        )
    notes = [undelivered, f"last error: {last_error[:500]}" if last_error else None]
    error = "; ".join(n for n in notes if n) or None
    safety = Safety(pii=workspace.pii_redaction)
    # A redrive given up again: its message is in the session already, from the first give-up.
    new: list[Message] = []
    if kept_message(session, item) is None:
        new.append(user_message(inbound, turn, safety, sender.user_id))
    record = audit_record(
        inbound, turn, started, "given_up", user_id=sender.user_id, safety=safety, error=error
    )
    record = with_trace(record, inbound, session, new)
    commit(deps.backend, workspace, session, inbound, new, clock=deps.clock, audit=record)
    return log_turn(record, safety)


def _stop(deps: TurnDeps, turn: Turn, step: Stop, started: float) -> _Ending:
    if step.reply is not None:
        send(deps.senders, turn.inbound, turn.session, turn.id, step.reply)
    record = _record(turn, started, step.outcome, error=step.error)
    if step.keep_user is not None:
        return _Ending(record, [step.keep_user])
    return _Ending(record, [] if step.remember else None)


def skills_of(deps: TurnDeps, workspace: WorkspaceConfig) -> list[Skill]:
    """The skills `workspace`'s turns may use: the prompt's catalogue and /skills read the same."""
    return deps.skills(workspace) if deps.skills else available_skills(deps.backend, workspace)


def _command(deps: TurnDeps, turn: Turn, step: Command, started: float) -> _Ending:
    """A chat command (shared.agent.commands): answered without the model, and no message kept;
    only what it changes in the session (and the event id) is committed."""
    # Imported here: most turns are no command, and the commands' module is a cold start's 5 ms.
    from shared.agent.commands import answer_command

    answer = answer_command(
        turn,
        step.command,
        skills=skills_of(deps, turn.workspace),
        default_model=deps.settings.resolved_model(),
        now=deps.clock(),
        schedules=deps.backend.schedules,
        tasks=deps.backend.tasks,
        audit=deps.backend.audit,
    )
    send(deps.senders, turn.inbound, turn.session, turn.id, answer.text)
    record = _record(turn, started, "command", error=answer.error)
    # A fresh conversation (/new) gets a fresh Orientation Document on its first turn.
    updates = answer.updates
    if answer.fresh:
        updates = {**updates, "orientation": "", "orientation_at": None}
    return _Ending(record, [], updates, fresh=answer.fresh)


def _answer(deps: TurnDeps, turn: Turn, step: Proceed, started: float) -> _Ending:
    """The model's answer, streamed into the channel. Emergency compaction may save a smaller
    window on the way, and `turn.session` becomes that session, the one to commit."""
    inbound, session = turn.inbound, turn.session
    _, window = split_window(session.active_messages, turn.workspace.active_window)
    if step.kept:
        # A redrive answers the message where it was said: what came after it is not its context.
        window = list(itertools.takewhile(lambda m: m.id != step.user.id, window))
    registry = tools_for(deps, turn.workspace)
    # In name order, whichever tools the registry holds (MCP servers' included): the schemas open
    # the cached prefix.
    tools = sorted(registry.specs(), key=lambda t: t.name)
    scope = recall_scope_for(deps.backend, turn.workspace, inbound, turn.sender.user_id)
    # Photos, voice notes and documents (shared.media.content): what is kept, and what is shown.
    media = _media(deps, turn, step)
    step = dataclasses.replace(step, user=media.user)
    # The context pipeline (shared.agent.pipeline): no model call; nothing at all when it is off.
    selection = select_context(
        memory_searcher(deps.backend),
        turn.workspace.id,
        turn.workspace.context,
        inbound.text,
        scope=scope,
        session_id=inbound.session_id,
        skills=catalogue(skills_of(deps, turn.workspace))
        if deps.tools.permits("skill", turn.workspace)
        else (),
        active_task=session.active_task,
        now=deps.clock(),
    )
    gated = _gate(deps, turn, selection) if turn.workspace.context.gate and selection.mode != "off" else None
    if gated is not None:
        selection = gated.selection
    orientation, oriented = _orientation(deps, turn, scope)
    prompt = system_prompt(
        deps,
        turn.workspace,
        session,
        inbound,
        tools,
        user_id=turn.sender.user_id,
        scope=scope,
        recent=[*window, step.user],
        selection=selection.text,
        orientation=orientation,
    )
    # A task waiting for the user's answer (shared.tasks): noted after the cached prefix. Looked
    # up only while the session says one may wait (a question's turn sets it), so other turns
    # read nothing; the first turn that finds none clears it.
    waiting = ""
    asked = turn.item.task is not None and turn.item.task.kind == "question"
    if deps.task_steps is not None and (session.tasks_waiting or asked):
        waiting = deps.task_steps.note(deps, turn.workspace, inbound)
    request = ChatRequest(
        model=step.model,
        system=f"{prompt.text}\n\n{waiting}" if waiting else prompt.text,
        cache_prefix=len(prompt.static),
        messages=[*window, media.shown],
        tools=tools,
        cache_key=prompt_cache_key(inbound),
        images=media.images,
    )
    ctx = _tool_context(deps, inbound, turn.sender.user_id, turn.id, scope)
    if bool(waiting) != session.tasks_waiting:
        ctx.session_updates["tasks_waiting"] = bool(waiting)
    # Each tool step saved as it completes: a turn cut by the deadline continues after its last
    # completed tool call on the next delivery (shared.agent.steps).
    log = deps.backend.steps
    steps = (
        DurableSteps(log, turn.workspace.id, turn.id, replies=False, fresh=first_delivery.get())
        if log is not None
        else None
    )
    # Streamed into the channel as it comes, where the channel can edit a message (Telegram,
    # Slack, Discord) or the web's live deltas (its outbox gets the final text once); WhatsApp gets
    # the final text once.
    # Led by what the user is told about files that were not opened (shared.agent.media).
    shown = noted(
        progressive_reply(deps.senders.get(inbound.channel), outbound(inbound, session, turn.id, "")), turn
    )
    # A context overflow rolls more of the window into Tier 1 and calls again (10, 3, then 1
    # message kept): shared.agent.emergency. The session it saves is the one to commit.
    result, turn.session = with_emergency_compaction(
        deps.backend,
        turn.workspace,
        session,
        request,
        lambda request: run_loop(
            step.provider,
            request,
            registry,
            ctx,
            turn.workspace,
            on_text=redacted(shown, turn.safety),
            safety=turn.safety,
            budget=turn.budget,
            steps=steps,
        ),
        origin=origin_of(inbound),
    )
    shown.finish(result.reply.content)  # redacted by the loop, as is everything it commits
    record = _record(turn, started, result.outcome, step, loop=result, budget=turn.budget)
    if selection.mode != "off":
        audited = {"context": selection.picks, "context_ms": selection.elapsed_ms}
        if gated is not None:
            audited["context_gate"] = gated.audit
        if oriented:
            audited["orientation_tokens"] = estimate(orientation)
        record = record.model_copy(update={"context_mode": selection.mode, **audited})
    if media.image_tokens or media.audio_seconds:
        record = record.model_copy(
            update={"image_tokens": media.image_tokens, "audio_seconds": round(media.audio_seconds, 3)}
        )
    kept = [] if step.kept else [step.user]
    resumed = steps is not None and bool(steps.saved)
    updates = ctx.session_updates
    if oriented:
        updates = {**updates, "orientation": orientation, "orientation_at": deps.clock()}
    return _Ending(record, [*kept, *result.messages], updates, resumed=resumed)


def _media(deps: TurnDeps, turn: Turn, step: Proceed) -> MediaInputs:
    """The message's media as the model reads it (shared.media.content, docs/media.md); a
    document's text is indexed under the sender's scope in this conversation."""
    backend, user_id = deps.backend, turn.sender.user_id
    media = MediaDeps(
        store=backend.media,
        transcriber=deps.transcriber,
        writer=MemoryWriter(backend.index, backend.embedder),
        capability_overrides=deps.settings.model_capabilities,
        transcription_usd_per_min=deps.settings.transcription_usd_per_min,
    )
    # The files this turn fetched (shared.agent.media.fetch_media), or, for a redrive of a kept
    # message that fetched nothing, those its attachments name.
    items = turn.media or stored_items(backend.media, turn.workspace.id, turn.inbound.attachments)
    return media_inputs(
        media,
        turn.workspace,
        items,
        step.user,
        model_ref=step.model_ref,
        user_id=user_id,
        scope=owner_for(turn.inbound, user_id),
        guard=turn.safety.guard,
        budget=turn.budget,
        kept=step.kept,
    )


def _gate(deps: TurnDeps, turn: Turn, selection: Selection) -> Gated:
    """The Refinement Gate over `selection` (shared.agent.gate), through the workspace's cheap
    model; a model that cannot be had is the gate's error, never the turn's."""
    from shared.agent.gate import cheap_model_ref, refine  # off by default: not on a cold start's path

    try:
        provider, model = deps.provider_factory(cheap_model_ref(turn.workspace))
    except SigilError:
        provider, model = None, ""
    return refine(
        selection,
        turn.inbound.text,
        config=turn.workspace.context,
        provider=provider,
        model=model,
        budget=turn.budget,
    )


def _orientation(deps: TurnDeps, turn: Turn, scope: RecallScope) -> tuple[str, bool]:
    """The conversation's Orientation Document, and whether this turn wrote it (the commit then
    keeps it on the session). With the pipeline off, or the document turned off: none."""
    config, session = turn.workspace.context, turn.session
    if config.mode == "off" or not config.orientation:
        return "", False
    now = deps.clock()
    if not needs_orientation(session, config, now):
        return session.orientation, False
    user_id = turn.sender.user_id
    may_load = deps.tools.permits("skill", turn.workspace)
    document = orientation_document(
        deps.backend,
        turn.workspace.id,
        person=turn.inbound.sender.name or user_id,
        scope=scope,
        facts=deps.facts(turn.workspace.id, user_id, scope) if deps.facts is not None else (),
        skills=catalogue(skills_of(deps, turn.workspace)) if may_load else (),
        now=now,
        budget_tokens=config.orientation_tokens,
    )
    return document, True


def tools_for(deps: TurnDeps, workspace: WorkspaceConfig) -> ToolRegistry:
    """What a turn of `workspace` offers: the gateway's tools and the workspace's own. A
    workspace tool never replaces one of the gateway's (their names are kept apart: mcp__...)."""
    if deps.workspace_tools is None:
        return deps.tools
    extra = [t for t in deps.workspace_tools(workspace) if t.name not in deps.tools]
    return deps.tools.extended(*extra) if extra else deps.tools


def _record(
    turn: Turn,
    started: float,
    outcome: Outcome,
    step: Proceed | None = None,
    *,
    loop: LoopResult | None = None,
    budget: TurnBudget | None = None,
    error: str | None = None,
) -> AuditRecord:
    """The turn's audit record; `step`, when the turn got as far as a model, names it."""
    model = step.model_ref if step is not None else None
    return audit_record(
        turn.inbound,
        turn.id,
        started,
        outcome,
        user_id=turn.sender.user_id,
        model=model,
        loop=loop,
        budget=budget,
        safety=turn.safety,
        error=error,
    )


def system_prompt(
    deps: TurnDeps,
    workspace: WorkspaceConfig,
    session: Session,
    inbound: InboundMessage,
    tools: list[ToolSpec],
    *,
    user_id: str,
    scope: RecallScope,
    recent: Sequence[Message] = (),
    selection: str = "",
    orientation: str = "",
) -> AssembledContext:
    """The turn's system prompt (shared.agent.context, docs/context.md): the workspace's prompt,
    the skills it may load and those this message loads, the tools, the sender's tacit facts,
    the channel's hints, the time, the rolling summary and, last, the note that tells the model
    what a quoted block is.
    `user_id` is the sender's Sigil user (in a group session, not necessarily who opened it);
    the tacit facts and the learned personality are those the turn's `scope` reaches.
    `recent` are the messages of the request (the window and the new message): the memory nudge
    (shared.agent.nudge) is decided from them, for this request only, and stored nowhere."""
    available = skills_of(deps, workspace)
    # The nudge points at memory_store: only where the workspace may run it.
    memory_tools = MEMORY_TOOL_NAMES if deps.tools.permits("memory_store", workspace) else ()
    return assemble_system_prompt(
        workspace,
        skills=select_skills(available, inbound.text),
        # Listed only where the model may load them: a workspace that denies the tool gets none.
        catalogue=catalogue(available) if deps.tools.permits("skill", workspace) else (),
        tools=tools,
        facts=deps.facts(workspace.id, user_id, scope) if deps.facts is not None else (),
        channel=inbound.channel,
        now=deps.clock(),
        active_task=session.active_task,
        summary=session.summary,
        learned=deps.personality(workspace.id, user_id, scope) if deps.personality is not None else "",
        nudge=memory_nudge(recent, memory_tools=memory_tools) or "",
        selection=selection,
        orientation=orientation,
    )


def prompt_cache_key(inbound: InboundMessage) -> str:
    """The key a provider groups this turn's calls under for its prompt cache (OpenAI's
    prompt_cache_key): the turns that share a static prefix are a workspace's on one channel (the
    channel hint is part of it). A digest, so no chat or user id leaves for the provider."""
    digest = hashlib.sha256(f"{inbound.workspace_id}\x00{inbound.channel}".encode()).hexdigest()
    return f"sigil-{digest[:32]}"


def recall_scope_for(
    backend: Backend, workspace: WorkspaceConfig, inbound: InboundMessage, user_id: str
) -> RecallScope:
    """What this turn's memory reads may reach, under the workspace's policy (docs/privacy.md).
    The sender's aliases are read only where the policy uses them (a direct conversation under
    the personal policy), from a per-process cache."""
    policy, group = workspace.memory.recall, is_group(inbound)
    personal = policy == "personal" and not group
    return recall_scope(
        policy,
        session_id=inbound.session_id,
        conversation=conversation_key(inbound.channel, inbound.chat_id),
        group=group,
        user_aliases=aliases_of(backend.identities)(inbound.workspace_id, user_id)
        if personal
        else (user_id,),
    )


def owner_for(inbound: InboundMessage, user_id: str) -> MemoryScope:
    """The scope of what the turn's tools write (a stored fact): the sender's, in this conversation."""
    return owner_scope(conversation_key(inbound.channel, inbound.chat_id), [user_id], group=is_group(inbound))


def _tool_context(
    deps: TurnDeps, inbound: InboundMessage, user_id: str, turn: str, scope: RecallScope
) -> ToolContext:
    # The workspace, session and memory scope a tool acts in are the turn's, never anything the
    # model wrote.
    return ToolContext(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        user_id=user_id,
        turn_id=turn,
        backend=deps.backend,
        scope=scope,
        owner=owner_for(inbound, user_id),
        now=deps.clock,
        inbound=inbound,
    )
