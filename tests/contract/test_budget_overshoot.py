"""How far a budget can be overshot by the turns in flight, on every adapter set (issue 27).

A turn reads its counters once, when it starts, checks before each model call what it read plus
what it spent since, and writes its spending with its commit (docs/budgets.md). So turns running
at the same time do not see one another's spending, and a call that starts under a limit may end
over it. docs/budgets.md#how-far-a-budget-can-be-overshot gives the bound these tests hold the
real turn to, with the real stores, in its worst case (every turn in flight has read the counters
before any of them commits):

    total < L + N x min(k x c, L - R + c)

for a limit L, N turns in flight, k model calls a turn may make (max_tool_calls_per_turn + 1),
c the dearest single call, and R the counter as those turns read it; and a turn that starts once
the counter is at or over L is denied before its first model call.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable, buckets
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import (
    AuditRecord,
    BudgetLimits,
    InboundMessage,
    LaneItem,
    ScopeLimits,
    Sender,
    ToolCall,
    WorkspaceConfig,
)
from shared.models.budgets import NANOS_PER_USD, BudgetUsage
from shared.providers.base import ChatRequest, Done, ProviderEvent, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider
from shared.tools import default_registry
from tests.integration.test_turn_budget import WS, Clock, ping

from .factories import ContractBackend

# Every model call costs c = $0.10: 100 input tokens at $1,000 per 1M.
CALL_TOKENS = 100
PRICES = PriceTable({"*": {"input_per_mtok": 1000, "output_per_mtok": 0}}, defaults={})
C = Decimal("0.10")
LIMIT = Decimal("0.50")  # L: the workspace's daily spending budget
TOOL_CALLS = 3  # max_tool_calls_per_turn: k = 4 model calls a turn at most
K = TOOL_CALLS + 1
TURNS = 4  # N: turns in flight at once (four sessions, as four lanes run them)
BUDGET = BudgetLimits(workspace=ScopeLimits(usd_per_day=LIMIT))


class AllReadFirst:
    """A model that asks for a tool on every call, 100 input tokens each, and holds each turn's
    first call until all the turns have made theirs: by then each has read the counters (a turn
    reads them before its first call) and none has committed (a turn commits after its last)."""

    def __init__(self, turns: int) -> None:
        self.barrier = threading.Barrier(turns, timeout=300)  # a safety net: the condition is all arrived

    def __call__(self, request: ChatRequest) -> list[ProviderEvent]:
        if not any(m.kind == "tool" for m in request.messages):
            self.barrier.wait()
        call = ToolCall(id=f"c{len(request.messages)}", name="ping", arguments=json.dumps({}))
        return [ToolCallEvent(call=call), Usage(input_tokens=CALL_TOKENS, output_tokens=0), Done()]


def turn_item(n: int) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"e{n}",
            channel="web",
            workspace_id=WS,
            session_id=f"web.s{n}",
            sender=Sender(id=f"u{n}"),
            chat_id=f"s{n}",
            text="go on",
        )
    )


def deps(backend: Backend, tmp_path: Path, provider: FunctionProvider, clock: Clock) -> TurnDeps:
    return TurnDeps(
        backend=backend,
        settings=Settings(data_dir=tmp_path),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        clock=clock,
        tools=default_registry().extended(ping),
        prices=PRICES,
    )


def spent_today(backend: Backend, clock: Clock) -> Decimal:
    [key] = [b.key for b in buckets(None, BUDGET, clock()) if b.period == "day"]
    return Decimal(backend.budgets.totals(WS, [key])[key].usd_nanos) / NANOS_PER_USD


def run_at_once(backend: Backend, tmp_path: Path, clock: Clock, first: int) -> list[AuditRecord]:
    provider = FunctionProvider(AllReadFirst(TURNS))
    turn_deps = deps(backend, tmp_path, provider, clock)
    with ThreadPoolExecutor(TURNS) as pool:
        return list(pool.map(lambda n: run_turn(turn_deps, turn_item(n)), range(first, first + TURNS)))


def bound(already: Decimal) -> Decimal:
    """The documented bound on the total, for turns that read `already` from the counter."""
    return LIMIT + TURNS * min(K * C, LIMIT - already + C)


@pytest.mark.parametrize("already", [Decimal("0"), Decimal("0.45")], ids=["fresh-day", "near-the-limit"])
def test_turns_in_flight_overshoot_a_budget_within_the_documented_bound(
    contract: ContractBackend, tmp_path: Path, already: Decimal
) -> None:
    backend, clock = contract.backend, Clock()
    # Given a workspace allowed $0.50 a day that has spent `already` today
    backend.workspaces.put(WorkspaceConfig(id=WS, budget=BUDGET, max_tool_calls_per_turn=TOOL_CALLS))
    if already:
        backend.budgets.charge(WS, None, BudgetUsage(usd_nanos=int(already * NANOS_PER_USD)), None, clock())
    # When four turns run at once, each reading the counter before any of them commits
    records = run_at_once(backend, tmp_path, clock, first=1)
    total = spent_today(backend, clock)

    # Then the budget is overshot, but within the bound
    assert LIMIT < total <= bound(already)
    if not already:
        # On a fresh day each turn saw $0 spent: each made all its k calls ($0.40, under the
        # limit on its own), and together they spent N x k x c
        assert total == TURNS * K * C == Decimal("1.60")
        assert {r.outcome for r in records} == {"limited"}
    else:
        # Near the limit each turn stopped itself after one call: its own view ($0.45 read plus
        # its $0.10) was over, so the overshoot is at most one call per turn in flight
        assert total == already + TURNS * C == Decimal("0.85")
        assert {r.outcome for r in records} == {"budget_denied"}
    # And the audit records add up to the counter: every call counted, once
    assert sum(Decimal(str(r.cost_usd)) for r in records) == total - already

    # And a turn that starts now reads the counter over the limit and makes no model call
    provider = FunctionProvider(AllReadFirst(1))
    late = run_turn(deps(backend, tmp_path, provider, clock), turn_item(99))
    assert late.outcome == "budget_denied" and not provider.requests
    assert f"(an estimated ${total:.2f} of $0.50)" in backend.outbox.read(WS, "web.s99")[-1].message.text
    assert spent_today(backend, clock) == total
