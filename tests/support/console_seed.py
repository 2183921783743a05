"""A workspace for the console's browser tests and screenshots, filled through the real code paths.

Two people talk to the agent through the real turn (shared.agent.turn.run_turn, a FunctionProvider
answering and calling memory_search when asked to look something up), in windows small enough that
their messages roll into Tier 1 and the index; then each session is compacted by the real
compaction with tests.support.consolidation.FakeConsolidator, one consolidation run per person,
which writes summaries and extracts facts. A second workspace holds one short conversation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.consolidation.compaction import compact_session
from shared.models import (
    DEFAULT_BUDGET,
    AssistantMessage,
    InboundMessage,
    LaneItem,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider, estimate_tokens
from tests.support.consolidation import FakeConsolidator

WS = "default"
OTHER_WS = "research"
ALICE, BOB = "alice", "bob"
ALICE_SESSION, BOB_SESSION = "web.alice.notes", "web.bob.trip"
ALICE_RUN, BOB_RUN = "run-alice-1", "run-bob-1"

ALICE_SAYS = [
    "I prefer dark mode in every editor.",
    "My manager is Sarah Chen.",
    "look up: what editor theme did I ask for?",
    "We decided to use PostgreSQL for the project.",
    "Please keep answers short.",
    "small talk about the weather today",
    "small talk about lunch plans",
    "thanks, that is all for now",
]
BOB_SAYS = [
    "I prefer green tea in the morning.",
    "the harbour ferry leaves on sundays at nine",
    "look up: when does the ferry leave?",
    "small talk about the quokka sanctuary",
    "small talk about the weekend",
    "see you next week",
]
LOOK_UP = "look up: "


def answer(request: ChatRequest) -> str | Iterable[ProviderEvent]:
    """Calls memory_search for a message starting "look up: ", then answers from its result."""
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        found = "found it" if "no memories" not in last.content else "found nothing"
        return f"I searched my memory and {found}."
    assert isinstance(last, UserMessage)
    if last.content.startswith(LOOK_UP):
        query = last.content.removeprefix(LOOK_UP)
        return [
            TextDelta(text=""),
            ToolCallEvent(call=ToolCall(id="call-1", name="memory_search", arguments=json.dumps({"query": query}))),
            Usage(input_tokens=estimate_tokens(request), output_tokens=12),
        ]
    return f"Noted: {last.content}"


def turn_deps(backend: Backend, settings: Settings) -> TurnDeps:
    model = FunctionProvider(answer)

    def provider(ref: str | None) -> tuple[Provider, str]:
        return model, "openai/gpt-4.1-mini"

    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=provider,
    )


def say(deps: TurnDeps, workspace_id: str, session_id: str, user: str, text: str, n: int) -> None:
    inbound = InboundMessage(
        event_id=f"ev-{session_id}-{n}",
        channel="web",
        workspace_id=workspace_id,
        session_id=session_id,
        sender=Sender(id=user, name=user.title()),
        chat_id=session_id,
        text=text,
    )
    record = run_turn(deps, LaneItem(inbound=inbound))
    assert record.outcome == "ok", record


def seed(backend: Backend, settings: Settings) -> None:
    for config in (
        WorkspaceConfig(
            id=WS,
            name="Support desk",
            active_window=4,
            summary_batch=4,
            budget=DEFAULT_BUDGET.model_copy(deep=True),
        ),
        WorkspaceConfig(id=OTHER_WS, name="Research", active_window=4, summary_batch=4),
    ):
        backend.workspaces.put(config)
    deps = turn_deps(backend, settings)
    for n, text in enumerate(ALICE_SAYS):
        say(deps, WS, ALICE_SESSION, ALICE, text, n)
    for n, text in enumerate(BOB_SAYS):
        say(deps, WS, BOB_SESSION, BOB, text, n)
    say(deps, OTHER_WS, "web.carol.1", "carol", "what is new in the literature?", 0)
    fake = FakeConsolidator()
    compact_session(backend, fake.model, WS, ALICE_SESSION, run_id=ALICE_RUN)
    compact_session(backend, fake.model, WS, BOB_SESSION, run_id=BOB_RUN)


__all__ = ["AssistantMessage", "seed"]
