"""The assembled system prompt through run_turn: a keyword skill reaches the model only when the
user's message has the keyword; the embedded skill store reads the workspace's skills folder."""

from __future__ import annotations

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import InboundMessage, LaneItem, Sender, WorkspaceConfig
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider
from shared.safety.injection import SYSTEM_PROMPT_NOTE

WS = "ws1"
SKILL = """---
name: k8s-help
description: Kubernetes know-how.
metadata:
  gateway:trigger: keyword
  gateway:keywords: kubernetes kubectl
---
Always suggest `kubectl describe` first.
"""


def item(event_id: str, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id="web.s1",
            sender=Sender(id="u1", name="Ada"),
            chat_id="s1",
            text=text,
        )
    )


def test_a_keyword_skill_is_in_the_prompt_only_when_the_keyword_is(
    backend: Backend, settings: Settings
) -> None:
    folder = settings.data_dir / "workspaces" / WS / "skills" / "k8s-help"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    provider = FunctionProvider(lambda request: "ok")

    def factory(ref: str | None) -> tuple[Provider, str]:
        return provider, "test-model"

    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=factory,
    )
    run_turn(deps, item("e1", "what's the weather?"))
    run_turn(deps, item("e2", "my Kubernetes pod keeps restarting"))
    without, with_skill = (r.system for r in provider.requests)
    # Without the keyword the skill is only listed, for the model to load with the skill tool
    assert "- k8s-help: Kubernetes know-how." in without and "kubectl describe" not in without
    # With it, its body is in the turn's context; the catalogue still lists it, so that the static
    # prefix the providers cache is the same on both turns
    assert "### Skill: k8s-help" in with_skill and "Always suggest `kubectl describe` first." in with_skill
    first, second = provider.requests
    assert first.system[: first.cache_prefix] == second.system[: second.cache_prefix]
    assert "### Skill: k8s-help" in second.system[second.cache_prefix :]
    for r in provider.requests:
        # The cached prefix: the static part, ending in the safety note, then (the context
        # pipeline's default, inject) the conversation's Orientation Document, written on the
        # first turn and sent unchanged on the second
        static, _, orientation = r.system[: r.cache_prefix].partition(f"{SYSTEM_PROMPT_NOTE}\n\n")
        assert static.startswith(WorkspaceConfig(id=WS).system_prompt)
        assert (
            orientation.startswith("## Orientation")
            and "1 skill to load with `skill`: k8s-help" in orientation
        )
        assert "Channel: web chat." in static and "Now: " in r.system[r.cache_prefix :]


def test_facts_about_the_sender_reach_the_prompt_and_are_read_once_a_minute(
    backend: Backend, settings: Settings
) -> None:
    from shared.memory.scope import owner_scope
    from shared.memory.tacit import TacitFacts
    from shared.models import RecallScope, Triple

    # Given a Tier-3 fact about the web sender "u1" (their Sigil user id, theirs) and one about
    # someone else (theirs)
    backend.memory.put_triple(
        Triple(
            id="f1",
            workspace_id=WS,
            subject="u1",
            predicate="prefers",
            object="tea",
            scope=owner_scope("web.dm-u1", ["u1"], group=False),
        )
    )
    backend.memory.put_triple(
        Triple(
            id="f2",
            workspace_id=WS,
            subject="bob",
            predicate="prefers",
            object="coffee",
            scope=owner_scope("web.dm-bob", ["bob"], group=False),
        )
    )
    reads: list[str] = []
    memory = backend.memory

    class Counting:
        def triples_by_subject(
            self, workspace_id: str, subject: str, *, scope: RecallScope, limit: int = 50
        ) -> list[Triple]:
            reads.append(subject)
            return memory.triples_by_subject(workspace_id, subject, scope=scope, limit=limit)

    now = [0.0]
    provider = FunctionProvider(lambda request: "ok")
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "m"),
        facts=TacitFacts(Counting(), clock=lambda: now[0]),  # type: ignore[arg-type]
    )
    # When two turns run within a minute
    run_turn(deps, item("e1", "what do I like?"))
    run_turn(deps, item("e2", "and again?"))
    # Then the prompt holds the sender's fact, not the other user's, and the store was read once
    assert all("u1 prefers tea" in r.system for r in provider.requests)
    assert all("coffee" not in r.system for r in provider.requests)
    assert reads == ["u1"]
    # and a minute later it is read again
    now[0] = 61.0
    run_turn(deps, item("e3", "still?"))
    assert reads == ["u1", "u1"]


def test_a_task_pinned_by_the_model_stays_in_later_prompts_until_cleared(
    backend: Backend, settings: Settings
) -> None:
    import json

    from shared.models import ToolCall
    from shared.providers.base import ChatRequest, Done, ProviderEvent, ToolCallEvent
    from shared.tools import default_registry

    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        last = request.messages[-1]
        if last.kind == "user" and "plan" in last.content:
            call = ToolCall(id="p1", name="pin_task", arguments=json.dumps({"task": "Plan the Lisbon trip"}))
            return [ToolCallEvent(call=call), Done(finish_reason="tool_calls")]
        if last.kind == "user" and "done" in last.content:
            call = ToolCall(id="p2", name="pin_task", arguments=json.dumps({"task": None}))
            return [ToolCallEvent(call=call), Done(finish_reason="tool_calls")]
        return "noted"

    provider = FunctionProvider(model)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "m"),
        tools=default_registry(),
    )
    # When the model pins a task in one turn
    run_turn(deps, item("e1", "let's plan a trip"))
    session = backend.sessions.get(WS, "web.s1")
    assert session is not None and session.active_task == "Plan the Lisbon trip"
    # Then the next turn's system prompt shows it
    run_turn(deps, item("e2", "flights first"))
    assert "Active task: Plan the Lisbon trip" in provider.requests[-1].system
    # And once cleared, it is gone from the prompt
    run_turn(deps, item("e3", "all done"))
    run_turn(deps, item("e4", "thanks"))
    assert "Active task" not in provider.requests[-1].system
