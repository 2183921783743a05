"""Per-turn fact extraction on one machine (shared.consolidation.turn_extraction, docs/consolidation.md):
real turns publish a delayed TurnCommitted into the SQLite bus, and the local scheduler, as the
gateway registers it (shared.local.consolidation), extracts once the debounce has passed. The bus
runs on an injected clock, so "5 s of quiet" is the clock moved, never a sleep; the consolidation
model is function-backed (tests.support.consolidation.FakeConsolidator).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.adapters.embedded import LocalScheduler, SqliteEventBus, build_embedded_backend
from shared.agent.turn import TurnDeps, recall_scope_for, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.consolidation.compaction import ConsolidationModel
from shared.consolidation.extraction_keys import Pending, pending_keys
from shared.consolidation.personality import SYNTHESIS_SYSTEM
from shared.consolidation.turn_extraction import extract_turn
from shared.consolidation.watermark import extracted_range
from shared.errors import ModelNotConfigured
from shared.local.consolidation import register_consolidation
from shared.memory.erasure import erase_user
from shared.memory.personality import LearnedPersonality, directives
from shared.memory.search import FACTS_KEY, MemorySearch
from shared.models import (
    WORKSPACE_WIDE,
    BudgetLimits,
    InboundMessage,
    LaneItem,
    ScopeLimits,
    Sender,
    ToolCall,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.budgets import BudgetUsage
from shared.ports import ReadsDocs
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry
from tests.support.consolidation import FakeConsolidator

WS, SID, USER = "default", "web.s1", "alice"


class Clock:
    """The bus's clock: the debounce elapses when a test moves it."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Local:
    def __init__(
        self, backend: Backend, clock: Clock, consolidator: FakeConsolidator, data_dir: Path
    ) -> None:
        self.backend, self.clock, self.consolidator = backend, clock, consolidator
        bus = backend.events
        assert isinstance(bus, SqliteEventBus)
        self.bus = bus
        self.scheduler = LocalScheduler(bus, max_attempts=1)
        # Registered as the gateway does; the hourly job runs at the first pass, then not for an hour.
        register_consolidation(self.scheduler, backend, lambda: consolidator.model)
        self.deps = TurnDeps(
            backend=backend,
            settings=Settings(data_dir=data_dir),
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: (FunctionProvider(echo), "turn-model"),
        )
        self.turns = 0

    def say(self, text: str) -> None:
        item = LaneItem(
            inbound=InboundMessage(
                event_id=f"e{self.turns}",
                channel="web",
                workspace_id=WS,
                session_id=SID,
                sender=Sender(id=USER),
                chat_id="s1",
                text=text,
            )
        )
        self.turns += 1
        assert run_turn(self.deps, item).outcome == "ok"

    def deliver(self) -> int:
        """Run what is due now (the scheduler's pass, in this thread); the TurnCommitted delivered."""
        before = self.delivered()
        self.scheduler.run_pending()
        return self.delivered() - before

    def delivered(self) -> int:
        return len(
            [e for e in self.bus.list_events(status="done", limit=1000) if e.event.type == "TurnCommitted"]
        )

    def recall(self, topic: str) -> str:
        inbound = InboundMessage(
            event_id="recall",
            text="what do I drink in the morning?",
            channel="web",
            workspace_id=WS,
            session_id=SID,
            sender=Sender(id=USER),
            chat_id="s1",
        )
        workspace = self.backend.workspaces.get(WS)
        assert workspace is not None
        scope = recall_scope_for(self.backend, workspace, inbound, USER)
        ctx = ToolContext(
            workspace_id=WS,
            session_id=SID,
            user_id=USER,
            turn_id="t-recall",
            backend=self.backend,
            scope=scope,
            owner=None,
            now=lambda: datetime.now(UTC),
        )
        result = agent_registry().execute(
            ToolCall(id="c1", name="memory_recall", arguments=json.dumps({"topic": topic})), ctx, workspace
        )
        assert not result.is_error, result.content
        return result.content


def echo(request: ChatRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return f"noted: {last.content}"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND", "SIGIL_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    clock = Clock()
    assert isinstance(backend.events, SqliteEventBus)
    backend.events.clock = clock
    backend.workspaces.put(WorkspaceConfig(id=WS))
    yield Local(backend, clock, FakeConsolidator(), tmp_path / "state")
    backend.close()


def facts(backend: Backend) -> list[tuple[str, str]]:
    return sorted(
        (t.predicate, t.object) for t in backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    )


def test_a_fact_said_in_a_turn_is_recallable_after_the_debounce(local: Local) -> None:
    # Given one turn in which the user says something about themselves
    local.say("I prefer green tea in the morning.")
    # Then nothing is extracted before the debounce has passed (the event waits; nobody sleeps)
    local.clock.advance(4.9)
    assert local.deliver() == 0
    assert local.consolidator.calls["extract"] == 0 and facts(local.backend) == []
    # When 5 s of quiet have passed
    local.clock.advance(0.2)
    assert local.deliver() == 1
    # Then one extraction ran, on a two-message session (compaction waits for 50 rolled out)
    assert local.consolidator.calls["extract"] == 1
    session = local.backend.sessions.get(WS, SID)
    assert session is not None and session.message_count == 2 and session.rolled_out_count == 0
    assert facts(local.backend) == [("morning-drink", "green tea")]
    # And memory_recall finds it, with its provenance (the message that said it) and the user's scope
    (fact,) = local.backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    assert fact.message_ids == [session.active_messages[0].id]
    assert fact.scope is not None and fact.scope.users == (USER,) and fact.source == "consolidation"
    assert "green tea" in local.recall("morning drink")
    # And the session's watermark covers the turn's two messages
    assert extracted_range(local.backend, WS, SID) == (0, 1)


def test_a_burst_of_turns_is_extracted_once_after_the_last(local: Local) -> None:
    # Given five turns, each within the debounce of the one before
    says = [
        "I prefer dark mode in every editor.",
        "small talk",
        "more small talk",
        "and more",
        "I prefer green tea.",
    ]
    for text in says:
        local.say(text)
        local.clock.advance(2.0)
        local.deliver()
    assert local.consolidator.calls["extract"] == 0
    # When the quiet period has passed after the last
    local.clock.advance(3.5)
    local.deliver()
    # Then every event was delivered, and exactly one extraction ran: the others were superseded
    assert local.delivered() == 5
    assert local.consolidator.calls["extract"] == 1
    # And it covered the whole burst (10 messages, more than spec 003's 6): the first turn's fact too
    assert facts(local.backend) == [("editor-theme", "dark mode"), ("morning-drink", "green tea")]
    assert extracted_range(local.backend, WS, SID) == (0, 9)


def test_compaction_does_not_extract_what_the_turns_did(local: Local) -> None:
    # Given a workspace that compacts every 10 rolled-out messages from a 4-message window
    local.backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4, summary_batch=10))
    # When 7 turns (14 messages) are each extracted after their quiet period, the 6th turn's
    # commit rolling message 9 out, so the scheduler also runs the CompactionDue of seqs 0-9
    for i in range(7):
        local.say("I prefer dark mode in every editor." if i == 1 else f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    # Then the batch was summarised, but compaction asked for no extraction: one per turn in all
    summaries = local.backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID)
    assert sorted((s.kind, s.first_seq, s.last_seq) for s in summaries) == [
        ("batch", 0, 9),
        ("rolling", 0, 9),
    ]
    assert local.consolidator.calls["summary"] == 1
    assert local.consolidator.calls["extract"] == 7
    assert local.delivered() == 7
    # And the fact was written once
    assert facts(local.backend) == [("editor-theme", "dark mode")]


def test_compaction_extracts_the_messages_turns_did_not(local: Local) -> None:
    # Given per-turn extraction off: no event is published, nothing is extracted per turn
    local.backend.workspaces.put(
        WorkspaceConfig(id=WS, active_window=4, summary_batch=10, turn_extraction=False)
    )
    for i in range(7):
        local.say("I prefer dark mode in every editor." if i == 1 else f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    assert [e for e in local.bus.list_events(limit=1000) if e.event.type == "TurnCommitted"] == []
    assert extracted_range(local.backend, WS, SID) is None
    # Then compaction, the safety net, extracted the batch itself (the scheduler ran its CompactionDue)
    assert local.consolidator.calls["summary"] == 1 and local.consolidator.calls["extract"] == 1
    assert facts(local.backend) == [("editor-theme", "dark mode")]
    # And keyed the message the fact was read from (seq 2, the second turn's), as it cited it
    (fact,) = local.backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    (said,) = local.backend.memory.get_messages(WS, SID, after_seq=1, limit=1)
    assert fact.message_ids == [said.id] and said.text.startswith("I prefer dark mode")
    assert fact_keys(local.backend, said.id) == f"{USER} editor-theme: dark mode"
    assert found(local.backend, "theme") == [said.id]


def test_turned_off_after_the_turn_extracts_nothing(local: Local) -> None:
    # Given a turn committed while extraction was on, then the workspace turns it off
    local.say("I prefer green tea in the morning.")
    local.backend.workspaces.put(WorkspaceConfig(id=WS, turn_extraction=False))
    (event,) = [e.event for e in local.bus.list_events() if e.event.type == "TurnCommitted"]
    # Then the delayed event extracts nothing, and says why
    result = extract_turn(local.backend, local.consolidator.model, event, run_id="r-off")
    assert result.status == "off"
    assert local.consolidator.calls["extract"] == 0 and facts(local.backend) == []


def test_an_over_budget_workspace_extracts_nothing_and_says_so(
    local: Local, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a turn, after which the workspace's budget for the day is used up
    local.say("I prefer green tea in the morning.")
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100))
    local.backend.workspaces.put(WorkspaceConfig(id=WS, budget=limits))
    local.backend.budgets.charge(WS, None, BudgetUsage(tokens_in=500), limits, datetime.now(UTC))
    # When the debounce passes and the scheduler delivers the event
    local.clock.advance(5.0)
    with caplog.at_level(logging.WARNING, logger="sigil.consolidation.turn"):
        assert local.deliver() == 1
    # Then no model call was made, no fact written, and the log says why
    assert local.consolidator.calls["extract"] == 0 and facts(local.backend) == []
    assert any("budget is used up" in r.getMessage() for r in caplog.records)
    assert extracted_range(local.backend, WS, SID) is None
    # And the run's result says so, naming the limit
    (event,) = [e.event for e in local.bus.list_events() if e.event.type == "TurnCommitted"]
    result = extract_turn(local.backend, local.consolidator.model, event, run_id="r-budget")
    assert result.status == "over_budget"
    assert result.budget_exhausted is not None and "workspace/day/tokens" in result.budget_exhausted


def test_the_extraction_is_charged_to_the_workspace_budget(local: Local) -> None:
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=1_000_000))
    local.backend.workspaces.put(WorkspaceConfig(id=WS, budget=limits))
    local.say("I prefer green tea in the morning.")
    (event,) = [e.event for e in local.bus.list_events() if e.event.type == "TurnCommitted"]
    before = used_tokens(local.backend)
    result = extract_turn(local.backend, local.consolidator.model, event, run_id="r-charge")
    # The call's tokens were added to the workspace's day, as compaction's are
    assert result.status == "done" and result.tokens_in > 0
    assert used_tokens(local.backend) - before == result.tokens_in + result.tokens_out
    # A redelivery finds the messages extracted already: no model call, nothing charged
    again = extract_turn(local.backend, local.consolidator.model, event, run_id="r-charge")
    assert again.status == "nothing" and local.consolidator.calls["extract"] == 1
    assert used_tokens(local.backend) - before == result.tokens_in + result.tokens_out


def used_tokens(backend: Backend) -> int:
    """The workspace's tokens today, as a check against a one-token limit reports them."""
    tiny = BudgetLimits(workspace=ScopeLimits(tokens_per_day=1))
    exhausted = backend.budgets.check(WS, None, tiny, datetime.now(UTC)).exhausted
    assert exhausted is not None
    return exhausted.used


def test_an_extraction_never_overlaps_a_compaction_of_the_session(local: Local) -> None:
    # Given compaction holding the session's lease
    local.say("I prefer green tea in the morning.")
    assert local.backend.consolidation.acquire_lease(WS, f"compact:{SID}", "compaction-run", 60.0)
    (event,) = [e.event for e in local.bus.list_events() if e.event.type == "TurnCommitted"]
    # Then the extraction is skipped, and leaves its messages to compaction's flush
    result = extract_turn(local.backend, local.consolidator.model, event, run_id="r-busy")
    assert result.status == "busy" and local.consolidator.calls["extract"] == 0
    assert extracted_range(local.backend, WS, SID) is None


def test_without_a_model_the_event_is_done_and_says_why(
    local: Local, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a gateway whose consolidation model is not configured (its scheduler's handlers)
    scheduler = LocalScheduler(local.bus, max_attempts=3)

    def no_model() -> ConsolidationModel:
        raise ModelNotConfigured("no model: set SIGIL_MODEL")

    register_consolidation(scheduler, local.backend, no_model)
    local.say("I prefer green tea in the morning.")
    local.clock.advance(5.0)
    # When its TurnCommitted falls due
    with caplog.at_level(logging.WARNING, logger="sigil.consolidation"):
        scheduler.run_pending()
    # Then it is done, not retried nor dead (retrying cannot help), and the log says why
    assert [
        (e.event.type, e.status, e.attempts)
        for e in local.bus.list_events()
        if e.event.type == "TurnCommitted"
    ] == [("TurnCommitted", "done", 1)]
    assert any("no model" in r.getMessage() for r in caplog.records)
    assert facts(local.backend) == [] and extracted_range(local.backend, WS, SID) is None


class StyleConsolidator(FakeConsolidator):
    """FakeConsolidator that also reads three style observations and answers the synthesis prompt."""

    synthesis_calls = 0

    def reply(self, system: str, text: str) -> str:
        if system == SYNTHESIS_SYSTEM:
            self.synthesis_calls += 1
            return "You keep answers short. You may joke lightly. You give one example first."
        return super().reply(system, text)

    @staticmethod
    def extract(text: str) -> str:
        found = json.loads(FakeConsolidator.extract(text))
        if "user: Keep it short" in text:
            found["styles"] = [
                {"key": "verbosity", "value": "short answers"},
                {"key": "humour", "value": "enjoys puns"},
                {"key": "engagement", "value": "asks for examples"},
            ]
        return json.dumps(found)


def test_a_style_read_again_by_overlapping_windows_is_reinforced_once(tmp_path: Path) -> None:
    # Given a style said in one turn, and two more turns whose 6-message windows read it again
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        clock = Clock()
        assert isinstance(backend.events, SqliteEventBus)
        backend.events.clock = clock
        backend.workspaces.put(WorkspaceConfig(id=WS))
        consolidator = StyleConsolidator()
        local = Local(backend, clock, consolidator, tmp_path / "state")
        for text in ("Keep it short, puns welcome, and show me an example first.", "ok", "fine"):
            local.say(text)
            clock.advance(5.1)
            local.deliver()
        # Then three extractions found it, and it was reinforced by none of them: the model named
        # no source, so each time the fallback found the same message (the user's, not the reply
        # that repeats it), which the style names already
        assert consolidator.calls["extract"] == 3
        session = backend.sessions.get(WS, SID)
        assert session is not None
        said = session.active_messages[0].id
        styles = [
            t
            for t in backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
            if t.category == "style"
        ]
        assert sorted((t.predicate, t.reinforced_count, tuple(t.message_ids)) for t in styles) == [
            ("engagement", 1, (said,)),
            ("humour", 1, (said,)),
            ("verbosity", 1, (said,)),
        ]
    finally:
        backend.close()


def test_a_turn_s_style_observations_teach_the_next_turn_its_learned_personality(tmp_path: Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        clock = Clock()
        assert isinstance(backend.events, SqliteEventBus)
        backend.events.clock = clock
        backend.workspaces.put(WorkspaceConfig(id=WS))
        consolidator = StyleConsolidator()
        local = Local(backend, clock, consolidator, tmp_path / "state")
        prompts: list[str] = []

        def recording(request: ChatRequest) -> str:
            prompts.append(request.system or "")
            return echo(request)

        local.deps.provider_factory = lambda ref: (FunctionProvider(recording), "turn-model")
        # Given a turn in which the person shows how they like to be answered
        local.say("Keep it short, puns welcome, and show me an example first.")
        assert "## Personality (Learned)" not in prompts[-1]
        # When its debounced extraction runs
        local.clock.advance(5.1)
        assert local.deliver() == 1
        # Then the three observations were stored and synthesised, once, in the same run
        assert consolidator.calls["extract"] == 1 and consolidator.synthesis_calls == 1
        (directive,) = directives(backend.memory, WS, USER, WORKSPACE_WIDE)
        assert directive.object.startswith("You keep answers short.")
        # And the next turn's system prompt carries it (the prompt's reader caches for a minute:
        # this is a fresh process's first read of the user)
        local.deps.personality = LearnedPersonality(backend.memory)
        local.say("What should I cook tonight?")
        assert "## Personality (Learned)\nYou keep answers short." in prompts[-1]
    finally:
        backend.close()


# ---------------------------------------------------------------- fact-augmented keys


def found(backend: Backend, query: str) -> list[str]:
    """The message documents BM25 finds for `query` (their own words, context and fact keys)."""
    search = MemorySearch(backend.index, backend.memory, backend.embedder)
    outcome = search.search(WS, query, scope=WORKSPACE_WIDE, tiers=["message"], mode="bm25")
    return [h.id for h in outcome.hits]


def fact_keys(backend: Backend, message_id: str) -> str | None:
    """What the message's own index document holds as its facts; None when it is not indexed."""
    assert isinstance(backend.index, ReadsDocs)
    docs = [d for d in backend.index.get_docs(WS, [message_id]) if d.id == message_id]
    return docs[0].metadata.get(FACTS_KEY, "") if docs else None


def test_a_fact_extracted_per_turn_keys_its_message_once_it_rolls_out(local: Local) -> None:
    # Given a 4-message window and batches of 10, and a turn whose fact is extracted after it
    local.backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4, summary_batch=10))
    local.say("I prefer green tea in the morning.")
    local.clock.advance(6.0)
    assert local.deliver() == 1
    session = local.backend.sessions.get(WS, SID)
    assert session is not None
    said = session.active_messages[0].id
    (fact,) = local.backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    assert fact.message_ids == [said]
    # Then its key waits: the message is still in the window, so not indexed
    assert fact_keys(local.backend, said) is None
    assert pending_keys(local.backend, WS, SID) == [Pending(0, said, fact.id)]
    # When two more turns roll it out (the third turn's commit indexes seqs 0-1, without keys)
    # and that turn's extraction runs after its quiet period
    for i in range(2):
        local.say(f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    # Then the message's document carries the fact: found by a word only the fact has
    assert fact_keys(local.backend, said) == f"{USER} morning-drink: green tea"
    assert found(local.backend, "drink") == [said]
    assert pending_keys(local.backend, WS, SID) == []
    # When turns go on until compaction summarises seqs 0-9 (the 6th turn's commit rolls 9 out)
    for i in range(2, 6):
        local.say(f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    summaries = local.backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID)
    assert ("batch", 0, 9) in {(s.kind, s.first_seq, s.last_seq) for s in summaries}
    # Then compaction extracted nothing again (the flush guard: one extraction per turn), the fact
    # is still one, and the key is still on its message
    assert local.consolidator.calls["extract"] == 7 and local.consolidator.calls["summary"] == 1
    assert facts(local.backend) == [("morning-drink", "green tea")]
    assert found(local.backend, "drink") == [said]


def test_compaction_puts_on_the_keys_per_turn_extraction_left_waiting(local: Local) -> None:
    # Given a fact extracted per turn while its message is in the window
    local.backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4, summary_batch=10))
    local.say("I prefer green tea in the morning.")
    local.clock.advance(6.0)
    local.deliver()
    session = local.backend.sessions.get(WS, SID)
    assert session is not None
    said = session.active_messages[0].id
    # When the workspace turns per-turn extraction off, and turns roll the message out and on to
    # a complete batch: no extraction runs after those turns, compaction alone
    local.backend.workspaces.put(
        WorkspaceConfig(id=WS, active_window=4, summary_batch=10, turn_extraction=False)
    )
    for i in range(6):
        local.say(f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
        if i == 1:
            # Rolled out and indexed (the third turn's commit), its key still waiting
            assert fact_keys(local.backend, said) == ""
    # Then compaction extracted only what the turns did not (seqs 2-9: once, nothing found)...
    assert local.consolidator.calls == {"summary": 1, "rolling": 0, "extract": 2}
    # ...and put the waiting key on the message the turn's extraction read the fact from
    assert fact_keys(local.backend, said) == f"{USER} morning-drink: green tea"
    assert found(local.backend, "drink") == [said]
    assert pending_keys(local.backend, WS, SID) == []


class ChangingConsolidator(FakeConsolidator):
    """FakeConsolidator that also hears a change of mind about the morning drink, citing its line."""

    @staticmethod
    def extract(text: str) -> str:
        found = json.loads(FakeConsolidator.extract(text))
        for line in text.splitlines():
            if "] user: " in line and "black coffee" in line:
                source = int(line[1 : line.index("]")])
                found["preferences"].append(
                    {"key": "morning-drink", "value": "black coffee", "source": source}
                )
        return json.dumps(found)


def test_a_fact_changed_before_its_message_rolls_out_keys_it_with_its_current_value(tmp_path: Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        clock = Clock()
        assert isinstance(backend.events, SqliteEventBus)
        backend.events.clock = clock
        backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4, summary_batch=50))
        local = Local(backend, clock, ChangingConsolidator(), tmp_path / "state")
        # Given a fact said in one turn, and changed in the next, both extracted in the window
        for text in ("I prefer green tea in the morning.", "Now I prefer black coffee in the morning."):
            local.say(text)
            clock.advance(6.0)
            local.deliver()
        session = backend.sessions.get(WS, SID)
        assert session is not None
        first, second = session.active_messages[0].id, session.active_messages[2].id
        # The newer value replaced the older in the same fact, which names both messages
        (fact,) = backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
        assert (fact.object, fact.message_ids) == ("black coffee", [first, second])
        # When both roll out and the next extraction puts the waiting keys on
        for i in range(2):
            local.say(f"small talk {i}")
            clock.advance(6.0)
            local.deliver()
        # Then each message is keyed with the fact as it is now: its current value, never the old
        assert (
            fact_keys(backend, first) == fact_keys(backend, second) == f"{USER} morning-drink: black coffee"
        )
        assert sorted(found(backend, "drink")) == sorted([first, second])
        assert pending_keys(backend, WS, SID) == []
        # And the person's erasure takes their facts, messages and documents: no fact text is left
        report = erase_user(backend, WS, USER)
        assert report.triples_deleted == 1
        assert found(backend, "drink") == [] and found(backend, "coffee") == []
    finally:
        backend.close()


def test_a_fact_gone_before_its_message_rolls_out_keys_nothing(local: Local) -> None:
    # Given an 8-message window (a message leaves the 6-message extraction window before it rolls
    # out), and a fact extracted per turn, its key waiting
    local.backend.workspaces.put(WorkspaceConfig(id=WS, active_window=8, summary_batch=50))
    local.say("I prefer dark mode in every editor.")
    local.clock.advance(6.0)
    local.deliver()
    (theme,) = local.backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    (waiting,) = pending_keys(local.backend, WS, SID)
    assert (waiting.seq, waiting.fact_id) == (0, theme.id)
    for i in range(2):
        local.say(f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    # When the fact is deleted (as erasure deletes one: the store's record and its document)
    local.backend.memory.delete_triples(WS, [theme.id])
    local.backend.index.delete(WS, [theme.id])
    # and two more turns roll its message out
    for i in range(2, 4):
        local.say(f"small talk {i}")
        local.clock.advance(6.0)
        local.deliver()
    # Then the message is indexed without it, and nothing waits for it any more
    assert fact_keys(local.backend, waiting.message_id) == ""
    assert found(local.backend, "theme") == [] and pending_keys(local.backend, WS, SID) == []
    assert local.consolidator.calls["extract"] == 5 and facts(local.backend) == []
