"""The memory nudge and the learned personality through the real turn (shared.agent.turn.run_turn)
on the embedded backend: the system prompt the model receives, before and after.

The prompts are compared with committed golden files (tests/fixtures/prompts/, without the tools
list, which other tools' descriptions change); `SIGIL_UPDATE_PROMPTS=1` rewrites them. docs/memory.md
quotes them.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.agent.nudge import NUDGE
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.consolidation.compaction import (
    ROLLING_SYSTEM,
    SUMMARY_SYSTEM,
    ConsolidationModel,
    compact_session,
)
from shared.consolidation.extraction import EXTRACTION_SYSTEM
from shared.consolidation.personality import SYNTHESIS_SYSTEM
from shared.memory.personality import LearnedPersonality
from shared.memory.tacit import TacitFacts
from shared.models import (
    WORKSPACE_WIDE,
    ContextConfig,
    InboundMessage,
    LaneItem,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider, estimate_tokens

WS = "ws-learn"
SID = "web.learn"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
PROMPTS = pathlib.Path(__file__).parent.parent / "fixtures" / "prompts"
_TOOLS_BLOCK = re.compile(r"## Tools you can call\n(?:- .*\n)*\n")


@pytest.fixture
def backend(tmp_path: pathlib.Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path / "data"))
    yield b
    b.close()


class Clock:
    """The turn's clock and the caches' monotonic one, moved by the test."""

    def __init__(self) -> None:
        self.now = T0
        self.ticks = 0.0

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)
        self.ticks += minutes * 60


def deps_for(backend: Backend, tmp_path: pathlib.Path, provider: FunctionProvider, clock: Clock) -> TurnDeps:
    return TurnDeps(
        backend=backend,
        settings=Settings(data_dir=tmp_path / "data"),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        clock=lambda: clock.now,
        facts=TacitFacts(backend.memory, clock=lambda: clock.ticks),
        personality=LearnedPersonality(backend.memory, clock=lambda: clock.ticks),
    )


def say(deps: TurnDeps, clock: Clock, n: int, text: str) -> str:
    """One turn of the user's; returns the system prompt the model received for it."""
    clock.advance(2)
    provider = deps.provider_factory(None)[0]
    assert isinstance(provider, FunctionProvider)
    before = len(provider.requests)
    record = run_turn(
        deps,
        LaneItem(
            inbound=InboundMessage(
                event_id=f"evt-{n}",
                channel="web",
                workspace_id=WS,
                session_id=SID,
                sender=Sender(id="alice", name="Alice"),
                chat_id="learn",
                text=text,
            )
        ),
    )
    assert record.outcome == "ok", record
    return provider.requests[before].system


def golden(name: str, prompt: str) -> None:
    """The prompt (without the tools list) equals tests/fixtures/prompts/<name>.txt; printed too."""
    shown = _TOOLS_BLOCK.sub("## Tools you can call\n- (the registry's tools, one line each)\n\n", prompt)
    print(f"\n----- {name} -----\n{shown}\n")  # the test output shows the prompts
    path = PROMPTS / f"{name}.txt"
    if os.environ.get("SIGIL_UPDATE_PROMPTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shown + "\n", encoding="utf-8")
    assert shown + "\n" == path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- the nudge


def agent(request: ChatRequest) -> str | list[ProviderEvent]:
    """Answers; when the prompt carries the nudge, stores what it was told first (as a model would)."""
    last = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
    if NUDGE in request.system and not any(isinstance(m, ToolResultMessage) for m in request.messages[last:]):
        args = {"predicate": "workplace", "object": "a bakery in Leeds", "category": "fact"}
        return [ToolCallEvent(call=ToolCall(id="c1", name="memory_store", arguments=json.dumps(args)))]
    return "Sure."


def test_the_nudge_is_in_one_request_after_disclosures_and_stored_nowhere(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    backend.workspaces.put(
        WorkspaceConfig(
            id=WS,
            active_window=22,
            system_prompt="You are Pip, a helpful assistant.",
            # The golden prompts fix this part of the prompt; the context pipeline's selection is
            # tested in test_context_pipeline (its dates include the wall clock's for a reply).
            context=ContextConfig(mode="off"),
        )
    )
    clock, provider = Clock(), FunctionProvider(agent)
    deps = deps_for(backend, tmp_path, provider, clock)
    # Ten answered turns of small talk: no disclosure, no nudge
    prompts = [say(deps, clock, n, f"What's the weather like in Lisbon, day {n}?") for n in range(10)]
    assert not any(NUDGE in p for p in prompts)
    golden("nudge_before", prompts[-1])

    # The eleventh says something about the user, and no memory tool ran in the last ten turns
    nudged = say(deps, clock, 10, "By the way, I work at a bakery in Leeds.")
    assert NUDGE in nudged
    # In the turn's context, after the cached prefix (which the safety note closes) and the time
    assert nudged.index(NUDGE) > nudged.index("Now: ") > nudged.index("written inside it.")
    golden("nudge_after", nudged)

    # The model stored it (memory_store in this turn): the next disclosure gets no nudge
    assert any(
        c.name == "memory_store" for m in provider.requests[-1].messages for c in getattr(m, "tool_calls", [])
    )
    assert NUDGE not in say(deps, clock, 11, "I usually start work at five.")

    # The hint was the request's alone: not in the window, Tier 1, the outbox or the audit records
    for n in range(12, 22):  # enough turns for the nudged one to roll out of the window
        say(deps, clock, n, f"What about day {n}?")
    session = backend.sessions.get(WS, SID)
    assert session is not None
    tier1 = backend.memory.get_messages(WS, SID, limit=500)
    assert any("bakery" in r.text for r in tier1)  # the nudged turn is in Tier 1 now
    stored = [
        *(m.model_dump_json() for m in session.active_messages),
        *(r.model_dump_json() for r in tier1),
        *(e.model_dump_json() for e in backend.outbox.read(WS, SID)),
        *(a.model_dump_json() for a in backend.audit.list_records(WS)),
    ]
    assert not any("Memory hint" in s or "memory_store` tool" in s for s in stored)


# ---------------------------------------------------------------- the learned personality


class Consolidator:
    """The cheap model for compaction: summaries, extraction of style cues, and the synthesis."""

    def __init__(self) -> None:
        self.calls = {"summary": 0, "rolling": 0, "extract": 0, "synthesis": 0}
        self.provider = FunctionProvider(self.answer)
        self.model = ConsolidationModel(self.provider, "cheap-model")

    def answer(self, request: ChatRequest) -> str:
        kinds = {SUMMARY_SYSTEM: "summary", ROLLING_SYSTEM: "rolling", EXTRACTION_SYSTEM: "extract"}
        kind = kinds.get(request.system, "synthesis" if request.system == SYNTHESIS_SYSTEM else "?")
        self.calls[kind] += 1
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        if kind == "summary":
            return "Alice chatted about travel."
        if kind == "rolling":
            return "Alice chatted about travel, at length."
        if kind == "extract":
            return json.dumps({"styles": self.styles(last.content)})
        assert kind == "synthesis", request.system
        return (
            "You keep answers short: a sentence or two unless asked for more. "
            "You may joke lightly, since this person enjoys puns. "
            "You give one concrete example before any theory."
        )

    @staticmethod
    def styles(conversation: str) -> list[dict[str, str]]:
        found: list[dict[str, str]] = []
        for line in conversation.splitlines():
            if "] user: " not in line:
                continue
            if "short" in line:
                found.append({"key": "verbosity", "value": "prefers short answers"})
            if "pun" in line:
                found.append({"key": "humour", "value": "enjoys puns"})
            if "example" in line:
                found.append({"key": "engagement", "value": "wants an example before theory"})
        return found


def test_the_learned_personality_reaches_the_next_prompt_and_is_written_once(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    backend.workspaces.put(
        WorkspaceConfig(
            id=WS,
            active_window=4,
            system_prompt="You are Pip, a helpful assistant.",
            # The golden prompts fix this part of the prompt; the context pipeline's selection is
            # tested in test_context_pipeline (its dates include the wall clock's for a reply).
            context=ContextConfig(mode="off"),
        )
    )
    clock, provider = Clock(), FunctionProvider(lambda request: "Sure.")
    deps = deps_for(backend, tmp_path, provider, clock)
    cues = ["Keep it short, please.", "Ha, I love a good pun.", "Show me an example first."]
    chat = [*cues, "What's in Lisbon?", "And in Porto?"]
    prompts = [say(deps, clock, n, text) for n, text in enumerate(chat)]
    assert not any("## Personality (Learned)" in p for p in prompts)
    golden("personality_before", prompts[-1])

    # Compaction of the first six messages (Tier 1: the turns rolled out of the 4-message window)
    fake = Consolidator()
    first = compact_session(backend, fake.model, WS, SID, run_id="run-1", batch=6, clock=lambda: clock.now)
    assert (first.status, first.summaries, first.directives_synthesised) == ("done", 1, 1)
    assert (fake.calls["extract"], fake.calls["synthesis"]) == (1, 1)
    # Every call the run made is counted for the budget, the synthesis included
    assert first.tokens_in == sum(estimate_tokens(r) for r in fake.provider.requests)

    # A minute on (the caches' life), the next turn's system prompt carries the directive
    clock.advance(1)
    after = say(deps, clock, 5, "What should I see in Porto?")
    learned = (
        "## Personality (Learned)\nYou keep answers short: a sentence or two unless asked for more. "
        "You may joke lightly, since this person enjoys puns. "
        "You give one concrete example before any theory."
    )
    assert learned in after
    # In the turn's context, after the cached prefix (the workspace's prompt, the tools, the note)
    note = after.index("written inside it.")
    learned_at = after.index("## Personality (Learned)")
    assert after.index("You are Pip") < after.index("## Tools") < note < learned_at
    golden("personality_after", after)

    # The same cues again, compacted with the rest: reinforced, the same set, no synthesis call
    for n, text in enumerate([*cues, "Lovely.", "Bye for now."], start=6):
        say(deps, clock, n, text)
    second = compact_session(backend, fake.model, WS, SID, run_id="run-2", batch=6, clock=lambda: clock.now)
    assert (second.status, second.summaries, second.directives_synthesised) == ("done", 2, 0)
    assert (fake.calls["extract"], fake.calls["synthesis"]) == (3, 1)
    assert second.facts_reinforced == 3
    styles = [
        t
        for t in backend.memory.triples_by_subject(WS, "alice", scope=WORKSPACE_WIDE)
        if t.category == "style"
    ]
    assert sorted((t.predicate, t.reinforced_count) for t in styles) == [
        ("engagement", 2),
        ("humour", 2),
        ("verbosity", 2),
    ]
    clock.advance(1)
    assert learned in say(deps, clock, 11, "Thanks!")
