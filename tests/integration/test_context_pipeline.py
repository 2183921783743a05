"""The context pipeline (shared.agent.pipeline, docs/context.md "The context pipeline") in real
turns, on the embedded backend and on AWS (moto and osmem): what each mode adds to the turn's
context, that it never touches the cached prefix, and the audit record's picks and scores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from osmem_server import OsmemServer

from shared.adapters.embedded import build_embedded_backend
from shared.agent.pipeline import MEMORY_HEADING, POINTERS_HEADING, match_skills
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import (
    AuditRecord,
    ContextConfig,
    ContextMode,
    InboundMessage,
    LaneItem,
    Sender,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, Provider
from shared.providers.function import FunctionProvider
from shared.replay import ReplayChange, render_markdown, replay
from shared.skills import Skill
from tests.support import moto_aws

WS = "ws1"
EARLIER = [
    "My sister Ines lives in Porto and teaches violin at the conservatory.",
    "We booked the cabin near Lake Bled for the second week of August.",
    "The boiler in the flat was serviced by Marco on Tuesday.",
    "Remember that the quarterly report is due to Helga on the 14th.",
]
QUESTION = "Which week did we book the cabin at Lake Bled?"


@pytest.fixture(params=["embedded", "aws"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "embedded":
        b = build_embedded_backend(Settings(data_dir=tmp_path, embedding_model="none"))
        yield b
        b.close()
        return
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    request.addfinalizer(server.close)
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        from shared.adapters.aws import build_aws_backend

        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        settings = resources.settings(
            embedding_model="none", opensearch_endpoint=server.url, data_dir=tmp_path
        )
        yield build_aws_backend(settings)


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


def converse(backend: Backend, mode: ContextMode) -> tuple[FunctionProvider, AuditRecord]:
    """Four earlier messages rolled out of a two-message window into memory, then the question."""
    config = ContextConfig(mode=mode, budget_tokens=400)
    backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2, context=config))
    provider = FunctionProvider(lambda request: "Noted.")

    def factory(ref: str | None) -> tuple[Provider, str]:
        return provider, "test-model"

    deps = TurnDeps(
        backend=backend,
        settings=Settings(),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=factory,
        skills=lambda ws: [
            Skill(name="travel-planner", description="Plan trips: cabins, trains and bookings.", body="b"),
            Skill(name="tax-returns", description="Prepare the yearly tax return.", body="b"),
        ],
    )
    for i, text in enumerate(EARLIER):
        run_turn(deps, item(i, text))
    return provider, run_turn(deps, item(len(EARLIER), QUESTION))


def context_of(request: ChatRequest) -> str:
    return request.system[request.cache_prefix :]


def test_inject_puts_the_matching_memory_in_the_turns_context(backend: Backend) -> None:
    provider, record = converse(backend, "inject")
    last = provider.requests[-1]
    # The earlier message about the cabin is in the context, under spec 004's heading, with the
    # skill that fits; the static prefix is the same as on the first turn
    context = context_of(last)
    assert MEMORY_HEADING in context and EARLIER[1] in context
    assert "- travel-planner" in context and "tax-returns" not in context
    first = provider.requests[0]
    assert last.system[: last.cache_prefix] == first.system[: first.cache_prefix]
    # And the audit record names every pick with its score, the cabin message first
    assert record.context_mode == "inject" and record.context_ms is not None
    memories = [p for p in record.context if p.kind == "memory"]
    assert memories and memories[0].score == max(p.score for p in memories) and memories[0].tokens > 0
    stored = {r.turn_id: r for r in backend.audit.list_records(WS)}[record.turn_id]
    assert stored.context == record.context
    assert [p.id for p in record.context if p.kind == "skill"] == ["travel-planner"]


def test_pointers_show_ids_and_openings_in_fewer_tokens(backend: Backend) -> None:
    provider, record = converse(backend, "pointers")
    context = context_of(provider.requests[-1])
    assert POINTERS_HEADING in context and MEMORY_HEADING not in context
    memories = [p for p in record.context if p.kind == "memory"]
    assert memories and all(p.id in context for p in memories if p.tokens)
    assert "Lake Bled" in context  # the opening words of the cabin message
    assert sum(p.tokens for p in memories) <= 300


def test_off_searches_nothing_and_adds_nothing(backend: Backend) -> None:
    provider, record = converse(backend, "off")
    context = context_of(provider.requests[-1])
    assert MEMORY_HEADING not in context and "pointers" not in context and EARLIER[1] not in context
    assert (record.context_mode, record.context, record.context_ms) == (None, [], None)


def test_skills_match_by_shared_words_best_first() -> None:
    skills = [
        Skill(name="travel-planner", description="Plan trips, cabins and train bookings.", body="b"),
        Skill(name="cabin-maintenance", description="Fix things in the cabin.", body="b"),
        Skill(name="tax-returns", description="Prepare the yearly tax return.", body="b"),
    ]
    matched = match_skills(skills, "Can you book a cabin and plan the trips?")
    assert [s.name for s, _ in matched] == ["travel-planner", "cabin-maintenance"]
    assert match_skills(skills, "hello there") == []


# ---------------------------------------------------------------- replay under each mode


def test_a_replay_under_each_mode_shows_each_turns_tokens_side_by_side(tmp_path: Path) -> None:
    # Given a conversation recorded with the pipeline off (a scripted model: its input tokens are
    # the prompt's words, shared.providers.function)
    settings = Settings(data_dir=tmp_path / "state", embedding_model="none")
    backend = build_embedded_backend(settings)
    try:
        converse(backend, "off")
    finally:
        backend.close()
    source = build_embedded_backend(settings)
    provider = FunctionProvider(lambda request: "Noted.")

    def factory(ref: str | None) -> tuple[Provider, str]:
        return provider, "test-model"

    # When it is replayed under each mode
    try:
        reports = {
            mode: replay(
                source,
                settings,
                WS,
                ReplayChange(context=ContextConfig(mode=mode, budget_tokens=400)),
                provider_factory=factory,
            )
            for mode in ("off", "pointers", "inject")
        }
    finally:
        source.close()
    # Then each report lists every turn's recorded and replayed tokens, and the mode it ran under
    markdown = {mode: render_markdown(r) for mode, r in reports.items()}
    for mode, text in markdown.items():
        assert f"context pipeline: {mode}, 400 tokens" in text
    last = {mode: r.turns[-1].replayed[0].tokens_in for mode, r in reports.items()}
    assert all(len(r.turns) == len(EARLIER) + 1 for r in reports.values())
    # The question about the cabin costs more with the pipeline on (these memories are one short
    # line each, so a pointer, with its id, is no shorter than the memory itself)
    assert last["off"] < min(last["pointers"], last["inject"])
    per_turn = [[t.replayed[0].tokens_in for t in reports[m].turns] for m in ("off", "pointers", "inject")]
    print("\nturn | off | pointers | inject (tokens in)")
    for i, row in enumerate(zip(*per_turn, strict=True), 1):
        print(f"{i} | " + " | ".join(map(str, row)))


def test_sigil_replay_refuses_an_unknown_context_mode_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shared.cli import app

    result = CliRunner().invoke(
        app, ["replay", "-w", WS, "--context-mode", "everything", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "bad change: mode: Input should be 'off', 'pointers' or 'inject'" in result.stderr
