"""Budgets inside a turn: "a budget exhausted mid-day", with a function-backed model on the
embedded backend. The clock is the turn's own (TurnDeps.clock), so the day is pinned."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import buckets
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.errors import ProviderError
from shared.models import (
    BudgetLimits,
    InboundMessage,
    LaneItem,
    ScopeLimits,
    Sender,
    ToolCall,
    WorkspaceConfig,
)
from shared.models.budgets import Counters
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext, default_registry, tool

WS, SESSION = "ws1", "web.s1"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 17, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class NoArgs(BaseModel):
    pass


@tool
def ping(args: NoArgs, ctx: ToolContext) -> str:
    """Answers pong."""
    return "pong"


def answer(request: ChatRequest) -> list[ProviderEvent]:
    # 400 tokens in, 100 out: each call spends exactly 500 of the budget.
    return [TextDelta(text="fine"), Usage(input_tokens=400, output_tokens=100), Done()]


def item(event_id: str, text: str = "hello") -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1"),
            chat_id="s1",
            text=text,
        )
    )


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


def deps_for(backend: Backend, tmp_path: Path, provider: FunctionProvider, clock: Clock) -> TurnDeps:
    return TurnDeps(
        backend=backend,
        settings=Settings(data_dir=tmp_path),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        clock=clock,
        tools=default_registry().extended(ping),
    )


def replies(backend: Backend) -> list[str]:
    return [e.message.text for e in backend.outbox.read(WS, SESSION)]


def test_a_budget_exhausted_mid_day_denies_until_midnight(backend: Backend, tmp_path: Path) -> None:
    # Given a workspace allowed 1,000 tokens a day, and a model that spends 500 a call
    backend.workspaces.put(
        WorkspaceConfig(id=WS, budget=BudgetLimits(workspace=ScopeLimits(tokens_per_day=1000)))
    )
    provider, clock = FunctionProvider(answer), Clock()
    deps = deps_for(backend, tmp_path, provider, clock)

    # When two turns in the morning spend it
    assert run_turn(deps, item("e1")).outcome == "ok"
    clock.now = clock.now.replace(hour=12)
    second = run_turn(deps, item("e2"))
    assert second.outcome == "ok"
    assert second.cost_usd > 0  # priced (an unknown model gets the conservative default)

    # Then at 14:00 the turn is denied before any model call, and the user is told why and when
    clock.now = clock.now.replace(hour=14)
    denied = run_turn(deps, item("e3", "one more?"))
    assert denied.outcome == "budget_denied"
    assert len(provider.requests) == 2
    assert replies(backend)[-1] == (
        "The daily token budget for this workspace is used up (1,000 of 1,000). "
        "It resets at 00:00 UTC, in 10 h."
    )
    # and the user's message is kept; the denial is not put in the model's mouth
    session = backend.sessions.get(WS, SESSION)
    assert session is not None
    assert [m.content for m in session.active_messages][-1].endswith("one more?")
    assert session.active_messages[-1].kind == "user"

    # And just after midnight the budget is back
    clock.now = datetime(2026, 3, 18, 0, 0, 1, tzinfo=UTC)
    assert run_turn(deps, item("e4")).outcome == "ok"
    assert len(provider.requests) == 3


def test_a_budget_running_out_between_tool_calls_ends_the_turn(backend: Backend, tmp_path: Path) -> None:
    # Given 400 tokens a day, and a model whose first call (asking for a tool) spends 500
    backend.workspaces.put(
        WorkspaceConfig(id=WS, budget=BudgetLimits(workspace=ScopeLimits(tokens_per_day=400)))
    )

    def model(request: ChatRequest) -> list[ProviderEvent]:
        call = ToolCall(id="c1", name="ping", arguments=json.dumps({}))
        return [ToolCallEvent(call=call), Usage(input_tokens=400, output_tokens=100), Done()]

    provider = FunctionProvider(model)
    record = run_turn(deps_for(backend, tmp_path, provider, Clock()), item("e1"))

    # Then the tool is not run (a tool is charged before it starts: it may spend money of its own),
    # the second model call is never made, and the user hears why
    assert len(provider.requests) == 1
    assert record.outcome == "budget_denied"
    assert record.tools_used == []
    assert "daily token budget for this workspace is used up (500 of 400)" in replies(backend)[-1]


def test_a_tool_call_past_the_tool_call_budget_is_not_run(backend: Backend, tmp_path: Path) -> None:
    # Given one tool call a day, and a model asking for two in one step
    backend.workspaces.put(
        WorkspaceConfig(id=WS, budget=BudgetLimits(workspace=ScopeLimits(tool_calls_per_day=1)))
    )
    runs: list[str] = []

    @tool
    def counted(args: NoArgs, ctx: ToolContext) -> str:
        """Counts its runs."""
        runs.append(ctx.turn_id)
        return "done"

    def model(request: ChatRequest) -> list[ProviderEvent]:
        calls = [ToolCall(id=f"c{n}", name="counted", arguments="{}") for n in (1, 2)]
        return [*(ToolCallEvent(call=c) for c in calls), Usage(input_tokens=10, output_tokens=5), Done()]

    provider = FunctionProvider(model)
    deps = deps_for(backend, tmp_path, provider, Clock())
    deps.tools = deps.tools.extended(counted)
    record = run_turn(deps, item("e1"))

    # Then the first runs, the second is refused before it starts, and no further model call is made
    assert len(runs) == 1
    assert len(provider.requests) == 1
    assert record.outcome == "budget_denied"
    assert "daily tool-call budget for this workspace is used up (1 of 1)" in replies(backend)[-1]


def test_without_a_budget_nothing_is_counted(backend: Backend, tmp_path: Path) -> None:
    provider = FunctionProvider(answer)
    deps = deps_for(backend, tmp_path, provider, Clock())
    for n in range(3):
        assert run_turn(deps, item(f"e{n}")).outcome == "ok"
    assert len(provider.requests) == 3


def test_a_merged_burst_remembers_every_event_it_answered(backend: Backend, tmp_path: Path) -> None:
    from shared.agent.coalesce import merge

    # Given a burst of two messages answered as one turn
    provider = FunctionProvider(answer)
    deps = deps_for(backend, tmp_path, provider, Clock())
    burst = merge([item("e1", "first"), item("e2", "second")])
    assert burst.inbound.merged_event_ids == ["e1", "e2"]
    assert run_turn(deps, burst).outcome == "ok"
    # When one of its events is redelivered on its own later (a platform's late retry)
    late = run_turn(deps, item("e2", "second"))
    # Then it is recognised as already handled: no second model call, no second reply
    assert late.outcome == "skipped_duplicate"
    assert len(provider.requests) == 1
    assert len(replies(backend)) == 1


def ping_then_answer(request: ChatRequest) -> list[ProviderEvent]:
    # 400 tokens in, 100 out a call: first a ping, then (with its result) the answer
    if any(m.kind == "tool" for m in request.messages):
        return [TextDelta(text="pong it is"), Usage(input_tokens=400, output_tokens=100), Done()]
    call = ToolCall(id="c1", name="ping", arguments=json.dumps({}))
    return [ToolCallEvent(call=call), Usage(input_tokens=400, output_tokens=100), Done()]


LIMITS = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100_000), user=ScopeLimits(tool_calls_per_day=50))


def counters(backend: Backend, user_id: str, now: datetime) -> list[Counters]:
    return list(backend.budgets.totals(WS, [b.key for b in buckets(user_id, LIMITS, now)]).values())


def test_a_turns_spending_lands_with_its_commit_once(backend: Backend, tmp_path: Path) -> None:
    backend.workspaces.put(WorkspaceConfig(id=WS, budget=LIMITS))
    clock = Clock()
    deps = deps_for(backend, tmp_path, FunctionProvider(ping_then_answer), clock)

    record = run_turn(deps, item("e1"))

    # Two model calls and a tool, counted in all four of the turn's counters, as audited
    assert record.outcome == "ok" and record.tools_used == ["ping"]
    assert record.user_id is not None
    [spent] = set(counters(backend, record.user_id, clock.now))
    assert (spent.tokens, spent.tool_calls) == (1000, 1) == (record.tokens_in + record.tokens_out, 1)
    assert spent.usd_nanos == round(record.cost_usd * 10**9)
    assert len(counters(backend, record.user_id, clock.now)) == 4
    # A redelivery of the committed turn is skipped, and charges nothing more
    assert run_turn(deps, item("e1")).outcome == "skipped_duplicate"
    assert set(counters(backend, record.user_id, clock.now)) == {spent}


def test_a_provider_error_mid_turn_still_counts_what_was_spent(backend: Backend, tmp_path: Path) -> None:
    backend.workspaces.put(WorkspaceConfig(id=WS, budget=LIMITS))

    def fails_after_the_tool(request: ChatRequest) -> list[ProviderEvent]:
        if any(m.kind == "tool" for m in request.messages):
            raise ProviderError("the model went away")
        return ping_then_answer(request)

    clock = Clock()
    with pytest.raises(ProviderError):
        run_turn(deps_for(backend, tmp_path, FunctionProvider(fails_after_the_tool), clock), item("e1"))

    # Nothing committed, but the first call's tokens and the tool call are counted: they were spent
    assert backend.sessions.get(WS, SESSION) is None
    [audit] = backend.audit.list_records(WS)
    assert audit.outcome == "error" and audit.user_id is not None
    assert {(c.tokens, c.tool_calls) for c in counters(backend, audit.user_id, clock.now)} == {(500, 1)}
