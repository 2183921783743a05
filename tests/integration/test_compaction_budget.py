"""Compaction and the workspace budget (docs/budgets.md, "Consolidation"), on the embedded set and
on the AWS set over moto (tests/contract/factories.py).

The conversation is tests.support.consolidation's: 100 messages in Tier 1, two batches of 50, so
an uninterrupted run makes five model calls (batch 1: summary, extraction; batch 2: summary,
extraction, fold). Every call here reports 1,000 tokens in and 100 out, priced at $1 / $5 per 1M
tokens: 1,100 tokens and 1,500,000 nano-dollars ($0.0015) a call, whatever the prompt.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import apsw
import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.budgets import PriceTable, bucket_key
from shared.config import Settings
from shared.consolidation.compaction import CompactionResult, ConsolidationModel, compact_session
from shared.consolidation.runner import consolidate_workspace
from shared.errors import ProviderError
from shared.models import WORKSPACE_WIDE, BudgetLimits, ScopeLimits, WorkspaceConfig
from shared.models.budgets import PERIODS, BudgetUsage, Counters
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, Usage
from shared.providers.function import FunctionProvider
from tests.contract.factories import BACKEND_FACTORIES
from tests.support.consolidation import RUN_AT, SID, USER, WINDOW, WS, FakeConsolidator
from tests.support.consolidation import seed as seed_conversation

PRICES = PriceTable({"function/cheap-model": {"input_per_mtok": 1, "output_per_mtok": 5}}, defaults={})
CALL_IN, CALL_OUT = 1_000, 100
CALL_NANOS = (1 * CALL_IN + 5 * CALL_OUT) * 1_000  # USD per 1M tokens = 1,000 nano-dollars a token


def calls(n: int) -> Counters:
    """What `n` consolidation calls add to a counter."""
    return Counters(tokens=n * (CALL_IN + CALL_OUT), tool_calls=0, usd_nanos=n * CALL_NANOS)


class PricedConsolidator:
    """FakeConsolidator's answers with a fixed usage per call, and a model factory that counts
    how often a run asked for the model (a run that makes no call never builds it)."""

    def __init__(self, before_call: Callable[[str, int], None] | None = None) -> None:
        self.fake = FakeConsolidator(before_call)
        self.provider = FunctionProvider(self.answer)
        self.built = 0

    def answer(self, request: ChatRequest) -> list[ProviderEvent]:
        text = self.fake.answer(request)
        return [TextDelta(text=text), Usage(input_tokens=CALL_IN, output_tokens=CALL_OUT), Done()]

    def model(self) -> ConsolidationModel:
        self.built += 1
        return ConsolidationModel(self.provider, "cheap-model", PRICES)

    @property
    def calls(self) -> dict[str, int]:
        return self.fake.calls


NO_CALLS = {"summary": 0, "rolling": 0, "extract": 0}


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "one") as contract:
        yield contract.backend


def seed(backend: Backend, budget: BudgetLimits | None) -> None:
    backend.workspaces.put(WorkspaceConfig(id=WS, active_window=WINDOW, budget=budget))
    assert seed_conversation(backend).rolled_out_count == 100


def run(backend: Backend, model: PricedConsolidator, at: datetime = RUN_AT) -> CompactionResult:
    return compact_session(backend, model.model, WS, SID, run_id="run-1", clock=lambda: at)


def workspace_counters(backend: Backend, at: datetime) -> dict[str, Counters]:
    """The workspace scope's counters of `at` by period; a period never charged is missing."""
    keys = {bucket_key("workspace", None, period, at): period for period in PERIODS}
    return {keys[key]: value for key, value in backend.budgets.totals(WS, list(keys)).items()}


def user_counters(backend: Backend, at: datetime) -> dict[str, Counters]:
    return backend.budgets.totals(WS, [bucket_key("user", USER, period, at) for period in PERIODS])


def daily_tokens(limit: int) -> BudgetLimits:
    return BudgetLimits(workspace=ScopeLimits(tokens_per_day=limit))


# ---------------------------------------------------------------- charged


def test_a_compaction_is_charged_to_the_workspace_scope_at_the_model_s_price(backend: Backend) -> None:
    # Limits on both scopes, far from used up: the session belongs to alice, but consolidation
    # is the workspace's own spending.
    seed(
        backend,
        BudgetLimits(
            workspace=ScopeLimits(tokens_per_day=1_000_000), user=ScopeLimits(tokens_per_day=1_000_000)
        ),
    )
    model = PricedConsolidator()
    result = run(backend, model)
    assert (result.status, result.summaries, result.checkpoint, result.budget_exhausted) == (
        "done",
        2,
        99,
        None,
    )
    assert model.calls == {"summary": 2, "rolling": 1, "extract": 2}
    assert (result.tokens_in, result.tokens_out) == (5 * CALL_IN, 5 * CALL_OUT)
    assert workspace_counters(backend, RUN_AT) == {"day": calls(5), "month": calls(5)}
    assert user_counters(backend, RUN_AT) == {}


def test_a_workspace_without_a_budget_is_not_counted(backend: Backend) -> None:
    seed(backend, None)
    result = run(backend, PricedConsolidator())
    assert (result.status, result.summaries) == ("done", 2)
    # The tokens are reported all the same; nothing reached the counters.
    assert (result.tokens_in, result.tokens_out) == (5 * CALL_IN, 5 * CALL_OUT)
    assert workspace_counters(backend, RUN_AT) == {}
    assert user_counters(backend, RUN_AT) == {}


def test_a_budget_that_only_counts_is_charged(backend: Backend) -> None:
    seed(backend, BudgetLimits())
    assert run(backend, PricedConsolidator()).status == "done"
    assert workspace_counters(backend, RUN_AT) == {"day": calls(5), "month": calls(5)}


def test_the_calls_of_a_batch_that_fails_half_way_are_charged(backend: Backend) -> None:
    seed(backend, BudgetLimits())

    def fail_fold(kind: str, n: int) -> None:
        if kind == "rolling":
            raise ProviderError("the model is down")

    model = PricedConsolidator(fail_fold)
    with pytest.raises(ProviderError):
        run(backend, model)
    # Batch 1 (summary, extraction) and batch 2's summary and extraction were made; the fold
    # failed before reporting any usage.
    assert model.calls == {"summary": 2, "rolling": 1, "extract": 2}
    assert workspace_counters(backend, RUN_AT) == {"day": calls(4), "month": calls(4)}
    assert backend.consolidation.get_checkpoint(WS, f"compact:{SID}") == "49"


# ---------------------------------------------------------------- skipped


def test_a_used_up_budget_makes_no_model_call_and_keeps_tier_1(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    seed(backend, BudgetLimits(workspace=ScopeLimits(tokens_per_month=5_000)))
    # Earlier this month the workspace's turns spent the month's tokens.
    backend.budgets.charge(WS, None, BudgetUsage(tokens_in=5_000), None, RUN_AT - timedelta(days=1))
    before = backend.sessions.get(WS, SID)
    model = PricedConsolidator()
    caplog.set_level(logging.INFO, logger="sigil.consolidation")

    result = run(backend, model)

    assert (result.status, result.summaries, result.checkpoint) == ("over_budget", 0, -1)
    assert result.budget_exhausted == "workspace/month/tokens 5000/5000"
    assert (result.tokens_in, result.tokens_out) == (0, 0)
    # No model call, and not even the model built.
    assert (model.built, model.calls) == (0, NO_CALLS)
    # The messages wait in Tier 1; nothing was summarised, checkpointed or charged.
    assert backend.memory.count_messages(WS, SID) == 100
    assert backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, limit=100) == []
    assert backend.consolidation.get_checkpoint(WS, f"compact:{SID}") is None
    assert backend.sessions.get(WS, SID) == before
    assert workspace_counters(backend, RUN_AT)["month"] == Counters(tokens=5_000)
    [line] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "budget is used up" in line.getMessage()
    assert (line.__dict__["workspace_id"], line.__dict__["budget"]) == (
        WS,
        "workspace/month/tokens 5000/5000",
    )


def test_a_budget_used_up_by_a_batch_stops_the_run_and_the_catch_up_finishes_after_the_reset(
    backend: Backend,
) -> None:
    # The day's limit is exactly batch 1's two calls: its charge uses the budget up.
    seed(backend, daily_tokens(2 * (CALL_IN + CALL_OUT)))
    model = PricedConsolidator()
    first = run(backend, model)
    assert (first.status, first.summaries, first.checkpoint) == ("over_budget", 1, 49)
    assert first.budget_exhausted == "workspace/day/tokens 2200/2200"
    assert model.calls == {"summary": 1, "rolling": 0, "extract": 1}
    assert workspace_counters(backend, RUN_AT) == {"day": calls(2), "month": calls(2)}

    # The hourly catch-up later that day finds the batch left, and the budget still used up.
    same_day = PricedConsolidator()
    hour_later = RUN_AT + timedelta(hours=1)
    report = consolidate_workspace(
        backend, same_day.model, WS, run_id="run-2", clock=lambda: hour_later, maintenance=False
    )
    assert [(c.status, c.summaries) for c in report.compactions] == [("over_budget", 0)]
    assert (report.totals.over_budget, report.totals.summaries) == (1, 0)
    assert (same_day.built, same_day.calls) == (0, NO_CALLS)

    # The first catch-up of the next day (the daily counter starts at zero) summarises it.
    next_day = PricedConsolidator()
    tomorrow = RUN_AT + timedelta(days=1)
    report = consolidate_workspace(
        backend, next_day.model, WS, run_id="run-3", clock=lambda: tomorrow, maintenance=False
    )
    [done] = report.compactions
    assert (done.status, done.summaries, done.checkpoint, report.totals.over_budget) == ("done", 1, 99, 0)
    assert next_day.calls == {"summary": 1, "rolling": 1, "extract": 1}
    assert workspace_counters(backend, tomorrow) == {"day": calls(3), "month": calls(5)}
    summaries = backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID, limit=100)
    assert sorted((s.kind, s.first_seq, s.last_seq) for s in summaries) == [
        ("batch", 0, 49),
        ("batch", 50, 99),
        ("rolling", 0, 99),
    ]


# ---------------------------------------------------------------- the store failing


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[Backend, Path]]:
    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    try:
        yield backend, tmp_path / "sigil.db"
    finally:
        backend.close()


def test_a_budget_store_failure_loses_nothing_the_compaction_wrote(
    embedded: tuple[Backend, Path], caplog: pytest.LogCaptureFixture
) -> None:
    backend, path = embedded
    # Counting only: the check before the first call reads nothing, so only the charges fail.
    seed(backend, BudgetLimits())
    with contextlib.closing(apsw.Connection(str(path))) as other:
        other.execute("DROP TABLE budget_counters")
    caplog.set_level(logging.INFO, logger="sigil.consolidation")

    result = run(backend, PricedConsolidator())

    assert (result.status, result.summaries, result.checkpoint) == ("done", 2, 99)
    assert (result.tokens_in, result.tokens_out) == (5 * CALL_IN, 5 * CALL_OUT)
    assert len(backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID, limit=100)) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # One per batch, with the tokens it could not charge and no memory text.
    assert [(r.getMessage(), r.__dict__["tokens_in"], r.__dict__["tokens_out"]) for r in warnings] == [
        ("compaction not charged to the budget", 2 * CALL_IN, 2 * CALL_OUT),
        ("compaction not charged to the budget", 3 * CALL_IN, 3 * CALL_OUT),
    ]
    logged = " ".join(str(r.__dict__) for r in caplog.records)
    assert "small talk" not in logged and "Messages 0-49" not in logged
