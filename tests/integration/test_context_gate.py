"""The Refinement Gate (shared.agent.gate, docs/context.md "The Refinement Gate"): one call to the
workspace's cheap model that keeps or trims the context pipeline's selection, and the
deterministic selection standing on every path where the gate's answer cannot be used: a
timeout, a provider error, no model for it, an answer that is not the JSON it asks for or names
an id it was not offered, and a spent budget. Scripted models (FunctionProvider) for each path,
and the real openai SDK against the fake OpenAI server for a whole turn."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.agent.gate import GATE_MAX_TOKENS, cheap_model_ref, refine
from shared.agent.pipeline import MEMORY_HEADING, Selection, narrowed
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import TurnBudget
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.deadline import current, passed
from shared.errors import ProviderError
from shared.memory.search import MemoryHit
from shared.models import (
    BudgetLimits,
    ContextConfig,
    DelegationConfig,
    InboundMessage,
    LaneItem,
    ScopeLimits,
    Sender,
    WorkspaceConfig,
)
from shared.providers import build_provider
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.skills import Skill
from tests.support.fake_openai import FakeOpenAI

WS = "ws1"
AT = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
CABIN = "We booked the cabin near Lake Bled for the second week of August."
BOILER = "The boiler at the cabin was serviced by Marco on Tuesday."
QUESTION = "Which week did we book the cabin at Lake Bled?"
TRAVEL = Skill(name="travel-planner", description="Plan trips: cabins, trains and bookings.", body="b")


def hit(id_: str, text: str, score: float) -> MemoryHit:
    return MemoryHit(
        id=id_, tier="message", text=text, score=score, session_id="web.s1", created_at=AT, metadata={}
    )


SELECTION = narrowed(
    Selection(
        mode="inject",
        hits=(hit("m-cabin", CABIN, 0.9), hit("m-boiler", BOILER, 0.4)),
        skills=((TRAVEL, 0.5),),
        budget_tokens=1000,
    ),
    {"m-cabin", "m-boiler", "travel-planner"},
)
CONFIG = ContextConfig(mode="inject", budget_tokens=1000, gate=True, gate_timeout_s=0.05)


def offered(request: ChatRequest) -> list[str]:
    """The ids a gate request offers, as a model reads them."""
    return re.findall(r"^- id=(\S+) ", str(request.messages[0].content), flags=re.MULTILINE)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path, embedding_model="none"))
    yield b
    b.close()


def budget_of(backend: Backend, tokens_per_day: int | None = None) -> TurnBudget:
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=tokens_per_day))
    return TurnBudget(store=backend.budgets, workspace_id=WS, user_id="u1", limits=limits)


def test_the_gate_keeps_or_trims_by_the_ids_it_answers(store: Backend) -> None:
    # Given a scripted cheap model that keeps what mentions Lake Bled, and the skill
    def cheap(request: ChatRequest) -> str:
        lines = str(request.messages[0].content).splitlines()
        keep = [i for i in offered(request) if any(f"id={i} " in ln and "Bled" in ln for ln in lines)]
        return json.dumps({"keep": [*keep, "travel-planner"]})

    provider = FunctionProvider(cheap)
    budget = budget_of(store)
    # When the gate judges the selection
    gated = refine(SELECTION, QUESTION, config=CONFIG, provider=provider, model="cheap", budget=budget)
    # Then it was shown every item with its id, and the boiler is gone from the text it returns
    assert offered(provider.requests[0]) == ["m-cabin", "m-boiler", "travel-planner"]
    assert gated.audit.verdict == "trimmed" and gated.audit.dropped == ["m-boiler"]
    assert CABIN in gated.selection.text and BOILER not in gated.selection.text
    assert "- travel-planner" in gated.selection.text
    assert [p.id for p in gated.selection.picks] == ["m-cabin", "travel-planner"]
    assert gated.audit.model == "function/cheap" and gated.audit.tokens_in > 0
    # And one that keeps everything leaves the selection as it was
    every = FunctionProvider(lambda r: "```json\n" + json.dumps({"keep": offered(r)}) + "\n```")
    whole = refine(SELECTION, QUESTION, config=CONFIG, provider=every, model="cheap", budget=None)
    assert whole.audit.verdict == "kept" and whole.selection == SELECTION


def _waits_out_its_deadline(request: ChatRequest) -> str:
    # A model slower than the gate's timeout: it answers only once the deadline in scope passed.
    while not passed(current()):
        threading.Event().wait(0.005)
    return json.dumps({"keep": []})


def _fails(request: ChatRequest) -> str:
    raise ProviderError("the cheap model is overloaded")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_waits_out_its_deadline, "timeout: no answer within 0.05 s"),
        (_fails, "error: ProviderError: the cheap model is overloaded"),
        (lambda r: "Keep the cabin one, it answers the question.", "invalid: no JSON object"),
        (lambda r: '{"keep": "m-cabin"}', 'invalid: no "keep" list of ids'),
        (lambda r: '{"keep": ["m-cabin", "m-elsewhere"]}', "invalid: ids not offered: m-elsewhere"),
        (lambda r: "{keep: [m-cabin]}", "invalid: not JSON"),
    ],
    ids=["timeout", "error", "prose", "not-a-list", "unknown-id", "broken-json"],
)
def test_the_deterministic_selection_stands_when_the_gate_fails(
    store: Backend, answer: object, reason: str
) -> None:
    budget = budget_of(store)
    charged_when_called: list[int] = []

    def model(request: ChatRequest) -> str:
        charged_when_called.append(budget.spent.tokens_out)
        return answer(request)  # type: ignore[operator,no-any-return]

    provider = FunctionProvider(model)
    gated = refine(SELECTION, QUESTION, config=CONFIG, provider=provider, model="cheap", budget=budget)
    assert gated.selection == SELECTION
    assert gated.audit.verdict == "fell_back" and gated.audit.reason == reason
    assert len(provider.requests) == 1
    # The call was charged before it was made, at its bound: a gate that timed out or failed
    # has paid for its attempt
    assert charged_when_called == [GATE_MAX_TOKENS] and budget.spent.tokens_in > 0


def test_a_spent_budget_makes_no_gate_call(store: Backend) -> None:
    budget = budget_of(store, tokens_per_day=100)
    budget.charge_model_call("function/main", tokens_in=150, tokens_out=0)
    provider = FunctionProvider(lambda r: json.dumps({"keep": []}))
    gated = refine(SELECTION, QUESTION, config=CONFIG, provider=provider, model="cheap", budget=budget)
    assert provider.requests == []
    assert gated.selection == SELECTION
    assert gated.audit.verdict == "fell_back" and (gated.audit.reason or "").startswith("budget: ")


def test_no_model_for_the_gate_and_nothing_to_judge() -> None:
    no_model = refine(SELECTION, QUESTION, config=CONFIG, provider=None, model="", budget=None)
    assert no_model.selection == SELECTION and no_model.audit.reason == "error: no model for the gate"
    provider = FunctionProvider(lambda r: "{}")
    empty = Selection(mode="inject")
    skipped = refine(empty, QUESTION, config=CONFIG, provider=provider, model="cheap", budget=None)
    assert skipped.audit.verdict == "skipped" and provider.requests == []


def test_the_gate_calls_the_cheap_model_class_else_the_workspaces_model() -> None:
    plain = WorkspaceConfig(id=WS, model="openai/gpt-4.1-mini")
    assert cheap_model_ref(plain) == "openai/gpt-4.1-mini"
    cheap = plain.model_copy(update={"delegation": DelegationConfig(models={"cheap": "openai/gpt-4.1-nano"})})
    assert cheap_model_ref(cheap) == "openai/gpt-4.1-nano"


# ---------------------------------------------------------------- a whole turn, through the SDK


def item(i: int, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"e{i}",
            channel="web",
            workspace_id=WS,
            session_id="web.s1",
            sender=Sender(id="u1", name="Ada"),
            chat_id="s1",
            text=text,
        )
    )


def test_a_turn_through_the_openai_sdk_is_shown_what_the_cheap_model_kept(
    store: Backend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a workspace whose cheap model (gpt-4.1-nano) gates what its model (gpt-4.1-mini) sees,
    # both behind the fake OpenAI server, reached through the real openai SDK
    def answer(body: dict[str, object]) -> str:
        if body["model"] != "gpt-4.1-nano":
            return "Noted."
        listing = str(body["messages"][-1]["content"])  # type: ignore[index]
        lines = [ln for ln in listing.splitlines() if ln.startswith("- id=")]
        return json.dumps({"keep": [ln.split()[1][3:] for ln in lines if "Lake Bled" in ln]})

    with FakeOpenAI(answer) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        settings = Settings(data_dir=tmp_path, embedding_model="none")
        config = ContextConfig(mode="inject", budget_tokens=1000, gate=True, gate_timeout_s=10)
        store.workspaces.put(
            WorkspaceConfig(
                id=WS,
                model="openai/gpt-4.1-mini",
                active_window=2,
                context=config,
                delegation=DelegationConfig(models={"cheap": "openai/gpt-4.1-nano"}),
            )
        )
        deps = TurnDeps(
            backend=store,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(store.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
        )
        for i, text in enumerate([CABIN, BOILER, "Thanks, that is all for now."]):
            run_turn(deps, item(i, text))
        record = run_turn(deps, item(3, QUESTION))
        # Then the last turn's gate call went to the cheap model, and the main call's system
        # prompt holds the cabin and not the boiler, which the gate dropped
        mains = [b for b in fake.requests if b["model"] == "gpt-4.1-mini"]
        gates = [b for b in fake.requests if b["model"] == "gpt-4.1-nano"]
    assert gates and "Which week did we book" in str(gates[-1]["messages"][-1]["content"])
    system = str(mains[-1]["messages"][0]["content"])
    assert MEMORY_HEADING in system and CABIN in system and BOILER not in system
    gate = record.context_gate
    assert gate is not None and gate.verdict == "trimmed" and gate.model == "openai/gpt-4.1-nano"
    assert gate.tokens_in > 0 and gate.tokens_out > 0 and gate.dropped
    stored = {r.turn_id: r for r in store.audit.list_records(WS)}[record.turn_id]
    assert stored.context_gate == gate
