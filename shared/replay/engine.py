"""Replay: recorded conversations run again against a change, in a sandbox copy of the workspace.

For each run (`runs`, a fresh sandbox each time), each recorded user message of each session, in
order, goes through the real turn (shared.agent.turn.run_turn) against the sandbox, with the
changed config and a provider from `provider_factory`; tools run against the sandbox too. The
clock of each turn is the recorded inbound's time, so the prompt says what it said then. The
source backend is only ever read.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from shared.agent.context import estimate
from shared.agent.gate import GATE_SYSTEM
from shared.agent.preflight import ProviderFactory
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.errors import BadRequest, NotFound, SigilError
from shared.memory.tacit import TacitFacts
from shared.memory.writer import RECENT_TAILS
from shared.models import (
    AuditRecord,
    InboundMessage,
    LaneItem,
    Sender,
    UserMessage,
    WorkspaceConfig,
    new_workspace,
)
from shared.providers import cached_provider_factory
from shared.providers.base import ChatRequest, Provider, ProviderEvent
from shared.replay.change import ReplayChange
from shared.replay.recorded import (
    AUDIT_RECORDS,
    CHANNELS,
    RecordedSession,
    RecordedTurn,
    group_turns,
    outbox_texts,
    read_session,
    session_messages,
    side_of,
)
from shared.replay.report import PromptView, ReplayReport, TurnSide, build_report, compare
from shared.replay.sandbox import SESSIONS, copy_workspace, open_sandbox

log = logging.getLogger("sigil.replay")

MAX_RUNS = 20


class NothingRecorded(NotFound):
    code = "nothing_recorded"


def recorded_sessions(
    source: Backend, workspace_id: str, session_ids: Sequence[str] = ()
) -> list[RecordedSession]:
    """The sessions to replay (`session_ids`, else every session of the workspace, by id), each
    with its recorded turns. Raises NotFound for an unknown workspace or session, and
    NothingRecorded when none of them holds a user message."""
    config = source.workspaces.get(workspace_id)
    known = {s.id: s for s in source.sessions.list_sessions(workspace_id, limit=SESSIONS)}
    if config is None and not known:
        raise NotFound(f"no workspace {workspace_id!r}: nothing is stored for it")
    missing = [s for s in session_ids if s not in known]
    if missing:
        raise NotFound(f"no session {', '.join(map(repr, missing))} in workspace {workspace_id!r}")
    chosen = list(dict.fromkeys(session_ids)) or sorted(known)
    records = source.audit.list_records(workspace_id, limit=AUDIT_RECORDS)
    sessions = [read_session(source, workspace_id, known[s], records) for s in chosen]
    sessions = [s for s in sessions if s.turns]
    if not sessions:
        raise NothingRecorded(
            f"nothing recorded to replay in workspace {workspace_id!r}: no user message stored"
        )
    return sessions


def replay(
    source: Backend,
    settings: Settings,
    workspace_id: str,
    change: ReplayChange,
    *,
    sessions: Sequence[str] = (),
    runs: int = 1,
    provider_factory: ProviderFactory | None = None,
) -> ReplayReport:
    """Replay the recorded `sessions` of `workspace_id` (all, when none is named) `runs` times
    against `change`, and compare. `settings` are the source's: the sandbox and the providers are
    built from them. Raises SigilError subclasses for bad input (NotFound, NothingRecorded,
    BadRequest, ModelNotConfigured), before any turn runs."""
    if not 1 <= runs <= MAX_RUNS:
        raise BadRequest(f"runs must be between 1 and {MAX_RUNS}, not {runs}")
    recorded = recorded_sessions(source, workspace_id, sessions)
    # A workspace nobody configured runs with the defaults a turn gives it (new_workspace).
    config = change.apply(source.workspaces.get(workspace_id) or new_workspace(workspace_id))
    factory = provider_factory or cached_provider_factory(settings)
    # A model that can't be built fails here, once, rather than as every turn's reply.
    factory(config.model)
    replayed = [
        _run(source, settings, config, recorded, factory=factory, run=run) for run in range(1, runs + 1)
    ]
    turns = [
        compare(
            side_of(t.after, t.audit, t.sent),
            [sides[(s.id, t.index)] for sides in replayed],
            session_id=s.id,
            index=t.index,
            event_id=t.user.event_id,
            user_text=t.text,
            received_at=t.received_at,
        )
        for s in recorded
        for t in s.turns
    ]
    return build_report(workspace_id, [s.id for s in recorded], change, runs, turns)


def _run(
    source: Backend,
    settings: Settings,
    config: WorkspaceConfig,
    recorded: list[RecordedSession],
    *,
    factory: ProviderFactory,
    run: int,
) -> dict[tuple[str, int], TurnSide]:
    """One run in a fresh sandbox: each session's turns in order; the answers by (session, index)."""
    with tempfile.TemporaryDirectory(prefix="sigil-replay-") as tmp:
        sandbox = open_sandbox(settings, Path(tmp))
        # The writer's per-process cache of recent records is keyed by workspace and session,
        # which the sandbox shares with the source: neither may lend the other context.
        RECENT_TAILS.forget(config.id)
        try:
            copy_workspace(source, sandbox, config, replayed={s.id for s in recorded})
            now = _Clock()
            sender = OutboxSender(sandbox.outbox)
            prompts = PromptLog()
            deps = TurnDeps(
                backend=sandbox,
                settings=settings,
                senders=SenderRegistry(dict.fromkeys(CHANNELS, sender)),
                provider_factory=prompts.factory(factory),
                clock=now,
                prices=PriceTable.from_settings(settings),
                facts=TacitFacts(sandbox.memory),
            )
            answers: dict[tuple[str, int], TurnSide] = {}
            for session in recorded:
                audits: dict[int, AuditRecord | SigilError] = {}
                for turn in session.turns:
                    now.at = turn.received_at
                    audits[turn.index] = _turn(deps, session, turn)
                answers |= _answers(sandbox, config.id, session, audits, prompts)
            log.info("replay run done", extra={"workspace_id": config.id, "run": run, "turns": len(answers)})
            return answers
        finally:
            RECENT_TAILS.forget(config.id)
            sandbox.close()


class PromptLog:
    """The system prompt of each replayed turn's first model call, by turn id: the providers the
    factory builds pass every request through it on the way to the model, unchanged. Only a
    turn's first call is kept (the one whose last message is the turn's user message), never a
    tool step's (the same prompt again) nor the Refinement Gate's (its own short prompt)."""

    def __init__(self) -> None:
        self._prompts: dict[str, PromptView] = {}

    def factory(self, inner: ProviderFactory) -> ProviderFactory:
        def build(ref: str | None) -> tuple[Provider, str]:
            provider, model = inner(ref)
            return _Logged(provider, self), model

        return build

    def seen(self, request: ChatRequest) -> None:
        last = request.messages[-1] if request.messages else None
        if not isinstance(last, UserMessage) or request.system == GATE_SYSTEM:
            return
        turn_id = last.id.removesuffix(".u")
        if turn_id not in self._prompts:
            self._prompts[turn_id] = PromptView(
                system=request.system, cache_prefix=request.cache_prefix, tokens=estimate(request.system)
            )

    def of(self, turn_id: str) -> PromptView | None:
        return self._prompts.get(turn_id)


class _Logged:
    """A provider whose requests the PromptLog sees; the answer is the provider's own."""

    def __init__(self, inner: Provider, log: PromptLog) -> None:
        self.inner, self.log, self.name = inner, log, inner.name

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        self.log.seen(request)
        return self.inner.stream(request)


class _Clock:
    at: datetime

    def __call__(self) -> datetime:
        return self.at


def _turn(deps: TurnDeps, session: RecordedSession, turn: RecordedTurn) -> AuditRecord | SigilError:
    chat_id, chat_type, thread_id = session.chat(turn)
    user = turn.user
    inbound = InboundMessage(
        event_id=_event_id(session, turn),
        channel=session.channel(turn),
        workspace_id=session.session.workspace_id,
        session_id=session.id,
        sender=Sender(id=user.sender_id or session.session.user_id or "replayed", name=user.sender_name),
        chat_id=chat_id,
        chat_type=chat_type,
        thread_id=thread_id,
        text=turn.text,
        received_at=turn.received_at,
    )
    try:
        return run_turn(deps, LaneItem(inbound=inbound, enqueued_at=turn.received_at))
    except SigilError as exc:
        # A failed turn (the provider, after its retries) is the replay's finding, not its end.
        return exc


def _event_id(session: RecordedSession, turn: RecordedTurn) -> str:
    return turn.user.event_id or f"replay-{turn.index}"


def _answers(
    sandbox: Backend,
    workspace_id: str,
    session: RecordedSession,
    audits: dict[int, AuditRecord | SigilError],
    prompts: PromptLog,
) -> dict[tuple[str, int], TurnSide]:
    stored = sandbox.sessions.get(workspace_id, session.id)
    messages = session_messages(sandbox, workspace_id, stored) if stored is not None else []
    by_event = {user.event_id: after for user, after in group_turns(messages)}
    # What a turn that kept no reply said all the same (a budget denial, a command): its outbox
    # parts, which every channel's sender writes in the sandbox.
    sent = outbox_texts(sandbox, workspace_id, session.id)
    out: dict[tuple[str, int], TurnSide] = {}
    for turn in session.turns:
        result = audits[turn.index]
        if isinstance(result, SigilError):
            side = TurnSide(outcome="error", error=result.message)
        else:
            side = side_of(by_event.get(_event_id(session, turn), []), result, sent.get(result.turn_id, ""))
            side = side.model_copy(update={"prompt": prompts.of(result.turn_id)})
        out[(session.id, turn.index)] = side
    return out
