"""The context pipeline (shared.agent.pipeline, docs/context.md "The context pipeline") in real
turns, on the embedded backend and on AWS (moto and osmem): what each mode adds to the turn's
context, that it never touches the cached prefix, and the audit record's picks and scores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from osmem_server import OsmemServer

from shared.adapters.embedded import build_embedded_backend
from shared.agent.context import estimate
from shared.agent.orientation import HEADING as ORIENTATION_HEADING
from shared.agent.orientation import MAX_FACTS as ORIENTATION_MAX_FACTS
from shared.agent.orientation import orientation_document
from shared.agent.pipeline import MEMORY_HEADING, POINTERS_HEADING, match_skills
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.inbound import conversation_key
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.memory.scope import owner_scope, recall_scope
from shared.memory.tacit import TacitFacts
from shared.models import (
    AuditRecord,
    ChatCommand,
    ContextConfig,
    ContextMode,
    DelegationConfig,
    Identity,
    InboundMessage,
    LaneItem,
    MemoryScope,
    ModelClass,
    Sender,
    Summary,
    Triple,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, Provider
from shared.providers.function import FunctionProvider
from shared.replay import ReplayChange, render_markdown, replay
from shared.safety.injection import SYSTEM_PROMPT_NOTE
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


def converse(
    backend: Backend, mode: ContextMode, gate: FunctionProvider | None = None
) -> tuple[FunctionProvider, AuditRecord]:
    """Four earlier messages rolled out of a two-message window into memory, then the question;
    with `gate`, the Refinement Gate on, through it as the workspace's cheap model."""
    config = ContextConfig(mode=mode, budget_tokens=400, gate=gate is not None)
    models: dict[ModelClass, str] = {"cheap": "function/cheap"}
    backend.workspaces.put(
        WorkspaceConfig(id=WS, active_window=2, context=config, delegation=DelegationConfig(models=models))
    )
    provider = FunctionProvider(lambda request: "Noted.")

    def factory(ref: str | None) -> tuple[Provider, str]:
        if gate is not None and ref == "function/cheap":
            return gate, "cheap"
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


def test_the_gate_trims_the_turns_selection_and_the_audit_says_so(backend: Backend) -> None:
    # A scripted cheap model that keeps only the items naming Lake Bled
    def keep_lake_bled(request: ChatRequest) -> str:
        lines = str(request.messages[0].content).splitlines()
        return json.dumps(
            {"keep": [ln.split()[1][3:] for ln in lines if ln.startswith("- id=") and "Bled" in ln]}
        )

    gate = FunctionProvider(keep_lake_bled)
    provider, record = converse(backend, "inject", gate=gate)
    context = context_of(provider.requests[-1])
    assert EARLIER[1] in context and "travel-planner" not in context
    assert record.context_gate is not None and record.context_gate.verdict == "trimmed"
    assert "travel-planner" in record.context_gate.dropped and record.context_gate.model == "function/cheap"
    assert "Which week did we book" in str(gate.requests[-1].messages[0].content)
    stored = {r.turn_id: r for r in backend.audit.list_records(WS)}[record.turn_id]
    assert stored.context_gate == record.context_gate


def test_a_gate_answer_it_cannot_use_leaves_the_selection_and_says_why(backend: Backend) -> None:
    gate = FunctionProvider(lambda request: "The cabin one, I would say.")
    provider, record = converse(backend, "inject", gate=gate)
    context = context_of(provider.requests[-1])
    assert EARLIER[1] in context and "- travel-planner" in context
    assert record.context_gate is not None and record.context_gate.verdict == "fell_back"
    assert record.context_gate.reason == "invalid: no JSON object"


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


# ---------------------------------------------------------------- the Orientation Document

ANN_DM, BOB_DM = conversation_key("web", "s1"), conversation_key("web", "s2")
START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def _fact(fid: str, subject: str, obj: str, scope: MemoryScope, at: datetime = START) -> Triple:
    return Triple(
        id=fid, workspace_id=WS, subject=subject, predicate="likes", object=obj, scope=scope, updated_at=at
    )


def _said_by(sender: str, chat: str, i: int, text: str) -> LaneItem:
    inbound = item(i, text).inbound
    return LaneItem(
        inbound=inbound.model_copy(
            update={
                "event_id": f"{sender}-{i}",
                "session_id": f"web.{chat}",
                "chat_id": chat,
                "sender": Sender(id=sender, name=sender.title()),
            }
        )
    )


def orienting(backend: Backend, clock: list[datetime], **config: object) -> tuple[FunctionProvider, TurnDeps]:
    """Ann (web user `ann`, chat s1) and Bob (`bob`, chat s2) in one workspace, each with a fact
    and a summary of their own direct conversation, and one fact the workspace shares."""
    for sender in ("ann", "bob"):
        backend.identities.create(
            Identity(workspace_id=WS, channel="web", channel_user_id=sender, user_id=sender)
        )
    backend.memory.put_triple(_fact("ann-tea", "ann", "green tea", owner_scope(ANN_DM, ["ann"], group=False)))
    backend.memory.put_triple(
        _fact("bob-secret", "bob", "a secret tattoo", owner_scope(BOB_DM, ["bob"], group=False))
    )
    backend.memory.put_triple(
        _fact("shared", "ann", "the office plants", owner_scope(None, [], group=False, shared=True))
    )
    for who, chat, topic in (
        ("ann", "s1", "Planning the Porto trip in June"),
        ("bob", "s2", "Bob's divorce papers"),
    ):
        backend.memory.put_summary(
            Summary(
                id=f"sum-{who}",
                workspace_id=WS,
                session_id=f"web.{chat}",
                text=f"{topic}, and what to do next.",
                first_seq=0,
                last_seq=3,
                start_at=START - timedelta(days=2),
                end_at=START - timedelta(days=1),
                user_id=who,
                scope=owner_scope(conversation_key("web", chat), [who], group=False),
            )
        )
    backend.workspaces.put(
        WorkspaceConfig(id=WS, context=ContextConfig(mode="inject", budget_tokens=400, **config))  # type: ignore[arg-type]
    )
    provider = FunctionProvider(lambda request: "Noted.")

    def seconds() -> float:
        return clock[0].timestamp()

    deps = TurnDeps(
        backend=backend,
        settings=Settings(),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        clock=lambda: clock[0],
        facts=TacitFacts(backend.memory, clock=seconds),  # cached a minute of the turns' clock
        skills=lambda ws: [Skill(name="travel-planner", description="Plan trips.", body="b")],
    )
    return provider, deps


def cached(request: ChatRequest) -> str:
    return request.system[: request.cache_prefix]


def orientation_of(request: ChatRequest) -> str:
    prefix = cached(request)
    return prefix[prefix.index(ORIENTATION_HEADING) :]


def test_the_orientation_is_written_at_the_start_and_reused_unchanged(backend: Backend) -> None:
    clock = [START]
    provider, deps = orienting(backend, clock)
    # When Ann starts a conversation
    first = run_turn(deps, _said_by("ann", "s1", 0, "Hello again"))
    # Then the cached prefix ends with her Orientation Document: her facts, her recent topic and
    # the workspace's skills, after the static part
    opening = cached(provider.requests[0])
    assert (
        f"{ORIENTATION_HEADING}\nWritten at the start of this conversation (2026-05-04 09:00 UTC)" in opening
    )
    assert "- ann likes green tea" in opening and "- ann likes the office plants" in opening
    assert "Planning the Porto trip in June" in opening
    assert "1 skill to load with `skill`: travel-planner" in opening
    assert opening.index(SYSTEM_PROMPT_NOTE) < opening.index(ORIENTATION_HEADING)
    assert first.orientation_tokens is not None and first.orientation_tokens > 0
    # And later turns of the conversation, minutes apart, with a fact learnt in between, send it
    # byte for byte: the new fact is in the turn's context, not in the orientation
    backend.memory.put_triple(
        _fact(
            "ann-jazz", "ann", "jazz", owner_scope(ANN_DM, ["ann"], group=False), START + timedelta(minutes=5)
        )
    )
    later = []
    for i in range(1, 4):
        clock[0] = START + timedelta(minutes=10 * i)
        later.append(run_turn(deps, _said_by("ann", "s1", i, f"And another thing, number {i}")))
    assert [cached(r) for r in provider.requests[1:]] == [opening] * 3
    assert "ann likes jazz" in provider.requests[-1].system[provider.requests[-1].cache_prefix :]
    assert all(r.orientation_tokens is None for r in later)
    session = backend.sessions.get(WS, "web.s1")
    assert session is not None and session.orientation and session.orientation in opening


def test_the_orientation_is_written_again_after_a_long_gap(backend: Backend) -> None:
    clock = [START]
    provider, deps = orienting(backend, clock, orientation_gap_s=6 * 3600)
    run_turn(deps, _said_by("ann", "s1", 0, "Hello again"))
    backend.memory.put_triple(
        _fact(
            "ann-jazz", "ann", "jazz", owner_scope(ANN_DM, ["ann"], group=False), START + timedelta(hours=1)
        )
    )
    clock[0] = START + timedelta(hours=5, minutes=59)  # within the gap: kept
    run_turn(deps, _said_by("ann", "s1", 1, "Still there?"))
    clock[0] += timedelta(hours=6, minutes=1)  # six hours and a minute after the last turn
    record = run_turn(deps, _said_by("ann", "s1", 2, "Back after a while"))
    first, kept, renewed = (cached(r) for r in provider.requests)
    assert kept == first and "jazz" not in first
    assert renewed != first and "- ann likes jazz" in renewed and "(2026-05-04 21:00 UTC)" in renewed
    assert record.orientation_tokens is not None


def test_the_orientation_holds_no_one_elses_private_facts_or_topics(backend: Backend) -> None:
    clock = [START]
    provider, deps = orienting(backend, clock)
    run_turn(deps, _said_by("ann", "s1", 0, "Hello"))
    run_turn(deps, _said_by("bob", "s2", 0, "Hello"))
    ann, bob = (orientation_of(r) for r in provider.requests)
    assert "green tea" in ann and "tattoo" not in ann and "divorce" not in ann
    assert "tattoo" in bob and "divorce" in bob and "green tea" not in bob and "Porto" not in bob
    # A fact about Ann that the workspace shares is in hers; Bob's holds facts about Bob only
    assert "ann likes the office plants" in ann and "ann likes" not in bob


def test_no_orientation_with_the_pipeline_off_or_the_document_turned_off(backend: Backend) -> None:
    clock = [START]
    provider, deps = orienting(backend, clock, orientation=False)
    run_turn(deps, _said_by("ann", "s1", 0, "Hello"))
    assert ORIENTATION_HEADING not in provider.requests[0].system
    backend.workspaces.put(WorkspaceConfig(id=WS, context=ContextConfig(mode="off")))
    run_turn(deps, _said_by("bob", "s2", 0, "Hello"))
    assert ORIENTATION_HEADING not in provider.requests[1].system


def test_the_orientation_is_deterministic_and_bounded(backend: Backend) -> None:
    scope = recall_scope(
        "personal", session_id="web.s1", conversation=ANN_DM, group=False, user_aliases=("ann",)
    )
    facts = [
        _fact(
            f"f{i:02d}",
            "ann",
            f"topic number {i} " + "with a long tail of words " * 3,
            scope=owner_scope(ANN_DM, ["ann"], group=False),
        )
        for i in range(40)
    ]
    skills = [Skill(name=f"skill-{i:02d}", description="d", body="b") for i in range(15)]

    def document(f: list[Triple], s: list[Skill], budget: int) -> str:
        return orientation_document(
            backend, WS, person="Ann", scope=scope, facts=f, skills=s, now=START, budget_tokens=budget
        )

    # The same memory in another order gives the same bytes
    assert document(facts, skills, 400) == document(facts[::-1], skills[::-1], 400)
    # Within its budget, in whole lines, at most MAX_FACTS facts; the skills named up to ten
    for budget in (100, 400, 2000):
        text = document(facts, skills, budget)
        assert estimate(text) <= budget and all(not line.endswith("…") for line in text.splitlines())
    full = document(facts, skills, 2000)
    assert full.count("- ann likes") == ORIENTATION_MAX_FACTS
    assert "15 skills to load with `skill`: skill-00, " in full and "skill-09 and 5 more" in full
    # Nothing known: no document
    assert document([], [], 400) == ""


def test_new_starts_a_conversation_with_a_fresh_orientation(backend: Backend) -> None:
    clock = [START]
    provider, deps = orienting(backend, clock)
    run_turn(deps, _said_by("ann", "s1", 0, "Hello"))
    backend.memory.put_triple(
        _fact(
            "ann-jazz", "ann", "jazz", owner_scope(ANN_DM, ["ann"], group=False), START + timedelta(minutes=1)
        )
    )
    clock[0] = START + timedelta(minutes=2)
    fresh = _said_by("ann", "s1", 1, "/new")
    fresh = LaneItem(inbound=fresh.inbound.model_copy(update={"command": ChatCommand(name="new")}))
    run_turn(deps, fresh)
    session = backend.sessions.get(WS, "web.s1")
    assert session is not None and session.orientation == "" and session.orientation_at is None
    clock[0] = START + timedelta(minutes=3)
    run_turn(deps, _said_by("ann", "s1", 2, "Hello again"))
    first, renewed = (orientation_of(r) for r in provider.requests)
    assert "jazz" not in first and "- ann likes jazz" in renewed and "(2026-05-04 09:03 UTC)" in renewed
