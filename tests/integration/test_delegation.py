"""Delegation end to end on `sigil dev`'s embedded lanes (issue 29): the real LocalGateway with a
function-backed model scripted for both the agent the user talks to and its task agents.

- the user asks for research; the first reply arrives without waiting for the task;
- the Researcher makes five tool calls across two invocations (the deadline cuts a model call in
  between), and its result is reported once, in the same conversation, after the message the user
  sent meanwhile;
- a cancel stops a running task, and the user is told;
- an interactive Worker asks the user a question through the agent and continues with the answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from shared.backend import Backend
from shared.config import Settings
from shared.errors import DeadlineExceeded
from shared.local.gateway import LocalGateway
from shared.models import (
    InboundMessage,
    LaneItem,
    RoleConfig,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    new_workspace,
)
from shared.models.tasks import Task
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.tasks.runner import TASK_NOTE
from shared.tools import ToolContext, tool
from tests.support.local_gateway import AMBIENT

WS = "default"
SESSION = "web.demo"
WAIT_S = 60.0


class LookupArgs(BaseModel):
    query: str


LOOKUPS: list[str] = []


@tool
def lookup(args: LookupArgs, ctx: ToolContext) -> str:
    """Looks a fact up (read-only)."""
    LOOKUPS.append(args.query)
    return f"fact about {args.query}"


def call(name: str, args: dict[str, object], call_id: str) -> list[ProviderEvent]:
    return [ToolCallEvent(call=ToolCall(id=call_id, name=name, arguments=json.dumps(args)))]


class Script:
    """The scripted model: the agent (delegates research, relays outcomes and questions, echoes
    anything else) and the task agents (five lookups, then finish_task; or a question first)."""

    def __init__(self) -> None:
        self.cut = False  # the deadline has cut one of the researcher's model calls
        self.user_spoke = threading.Event()  # the test's go-ahead for the researcher's second half
        self.release = threading.Event()  # the go-ahead for the cancel scenario's task
        self.researcher_calls = 0

    def __call__(self, request: ChatRequest) -> str | list[ProviderEvent]:
        if TASK_NOTE in request.system:
            return self.task(request)
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            if last.name == "delegate":
                return f"Started: {json.loads(last.content)['task_id']}. I'll tell you when it reports."
            return f"Tool said: {last.content}"
        text = last.content if isinstance(last, UserMessage) else ""
        if text.startswith("[Task "):
            return f"Update on your task: {text}"
        if "research" in text or "slow job" in text:
            role = "researcher" if "research" in text else "worker"
            return call("delegate", {"role": role, "brief": text}, "d1")
        if "my answer:" in text:
            task_id = text.split("task ")[1].split()[0]
            return call("answer_task", {"task_id": task_id, "answer": text}, "ans1")
        return f"echo: {text}"

    def task(self, request: ChatRequest) -> str | list[ProviderEvent]:
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        brief = str(request.messages[0].content)
        if "slow job" in brief:
            return self.worker(request, results)
        self.researcher_calls += 1
        if len(results) == 3 and not self.cut:
            self.cut = True
            # As a provider does when the invocation's deadline cuts its stream.
            raise DeadlineExceeded("the invocation's deadline cut the model call")
        if len(results) == 3:
            assert self.user_spoke.wait(WAIT_S), "the test never let the researcher go on"
        if "cancel" in brief and len(results) == 1:
            assert self.release.wait(WAIT_S)
        if len(results) < 5:
            return call("lookup", {"query": f"tides {len(results) + 1}"}, f"l{len(results) + 1}")
        findings = [{"text": "Tides follow the moon", "sources": [r.tool_call_id for r in results]}]
        args = {"summary": "High tide is at 06:12.", "findings": findings, "confidence": 0.8}
        return call("finish_task", args, "fin")

    def worker(self, request: ChatRequest, results: list[ToolResultMessage]) -> str | list[ProviderEvent]:
        answered = [m for m in request.messages[1:] if isinstance(m, UserMessage)]
        if not results:
            return call("ask_user", {"question": "Which colour should it be?"}, "q1")
        if answered:
            return f"Painted it as asked ({answered[-1].content})."
        return "waiting"


@pytest.fixture
def script() -> Script:
    LOOKUPS.clear()
    return Script()


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: Script) -> Iterator[LocalGateway]:
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    gw = LocalGateway(Settings(data_dir=tmp_path / "state", model="function/scripted"))
    provider = FunctionProvider(script)
    gw.deps.provider_factory = lambda ref: (provider, "scripted")
    gw.deps.tools = gw.deps.tools.extended(lookup)
    gw.start()
    # An operator's researcher: the built-in role's instructions, with the test's lookup tool.
    roles = {
        "researcher": RoleConfig(instructions="Research.", tools=["lookup"]),
        "worker": RoleConfig(instructions="Work.", tools=[], interactive=True),
    }
    workspace = new_workspace(WS)
    gw.backend.workspaces.put(
        workspace.model_copy(update={"delegation": workspace.delegation.model_copy(update={"roles": roles})})
    )
    try:
        yield gw
    finally:
        script.user_spoke.set()
        script.release.set()
        gw.stop()


def say(backend: Backend, event_id: str, text: str) -> None:
    """Alice's web message `text` onto the demo session's lane (sigil dev's, or the cloud's)."""
    inbound = InboundMessage(
        event_id=event_id,
        channel="web",
        workspace_id=WS,
        session_id=SESSION,
        sender=Sender(id="alice"),
        chat_id="demo",
        text=text,
    )
    backend.lanes.submit(LaneItem(inbound=inbound, correlation_id=f"req-{event_id}"))


def replies(backend: Backend) -> list[str]:
    return [e.message.text for e in backend.outbox.read(WS, SESSION)]


def wait_for(what: Callable[[], object], describe: Callable[[], object]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not what():
        assert time.monotonic() < deadline, f"timed out; {describe()}"
        threading.Event().wait(0.05)


def only_task(gw: LocalGateway) -> Task:
    assert gw.backend.tasks is not None
    (task,) = gw.backend.tasks.list_tasks(WS)
    return task


def test_research_is_delegated_and_reported_once_after_what_the_user_said_meanwhile(
    gateway: LocalGateway, script: Script
) -> None:
    gw = gateway
    # When the user asks for research
    say(gw.backend, "e1", "Please research the tides")
    wait_for(lambda: len(replies(gw.backend)) == 1, lambda: replies(gw.backend))
    # Then the first reply arrives at once, while the task still runs
    (first,) = replies(gw.backend)
    task = only_task(gw)
    assert first == f"Started: {task.id}. I'll tell you when it reports."
    assert not task.terminal and task.role == "researcher"
    # And the task's first invocation was cut by the deadline after three lookups and continues
    wait_for(lambda: script.cut and only_task(gw).invocations >= 1, lambda: only_task(gw))
    # When the user says something else meanwhile
    say(gw.backend, "e2", "And what about the weather?")
    wait_for(lambda: len(replies(gw.backend)) == 2, lambda: replies(gw.backend))
    script.user_spoke.set()
    # Then the task's outcome is reported after that, in the same conversation, once
    wait_for(
        lambda: len(replies(gw.backend)) == 3 and only_task(gw).outcome_delivered,
        lambda: (replies(gw.backend), only_task(gw)),
    )
    said = replies(gw.backend)
    assert said[1] == "echo: And what about the weather?"
    assert said[2].startswith(f"Update on your task: [Task {task.id} (researcher) finished:")
    assert "High tide is at 06:12." in said[2] and 'Untrusted data from "task' in said[2]
    # And the researcher made its five lookups across two invocations, none repeated
    assert [f"tides {n}" for n in range(1, 6)] == LOOKUPS
    done = only_task(gw)
    assert done.status == "done" and done.invocations == 2
    assert done.usage.tool_calls == 6  # five lookups and finish_task
    assert done.result is not None and done.result.summary == "High tide is at 06:12."
    assert done.result.findings[0].sources == ["l1", "l2", "l3", "l4", "l5"]
    # And its full output is in the session's scratchpad, not the conversation
    assert gw.backend.scratchpad is not None
    full = gw.backend.scratchpad.get(WS, SESSION, f"task/{task.id}")
    assert full is not None and "fact about tides 5" in full
    assert done.result.scratchpad_keys == [f"task/{task.id}"]
    session = gw.backend.sessions.get(WS, SESSION)
    assert session is not None
    assert not any("fact about tides" in m.content for m in session.active_messages)
    # And each invocation was audited on its own, linked to the delegating turn
    records = [r for r in gw.backend.audit.list_records(WS) if r.task_id == task.id]
    assert len(records) == 2
    assert {r.parent_turn_id for r in records} == {task.parent_turn_id}
    assert {r.correlation_id for r in records} == {"req-e1"}
    # And a second outcome for the task changes nothing: the lane drops it
    from shared.tasks.items import outcome_item

    assert gw.backend.lanes.submit(outcome_item(done, pii=False)).status == "duplicate"


def test_a_cancel_stops_a_running_task_and_the_user_is_told(gateway: LocalGateway, script: Script) -> None:
    gw = gateway
    say(gw.backend, "e1", "Please research the tides, I may cancel")
    wait_for(lambda: len(replies(gw.backend)) == 1 and LOOKUPS, lambda: (replies(gw.backend), LOOKUPS))
    # When the user cancels it while it runs (what `/tasks cancel` stores)
    tasks = gw.backend.tasks
    assert tasks is not None
    task = only_task(gw)
    tasks.save(task.model_copy(update={"cancel_requested": True}))
    script.release.set()
    # Then it stops after the step in flight, and the user is told
    wait_for(lambda: only_task(gw).outcome_delivered, lambda: only_task(gw))
    assert only_task(gw).status == "cancelled"
    assert LOOKUPS == ["tides 1", "tides 2"]
    wait_for(lambda: len(replies(gw.backend)) == 2, lambda: replies(gw.backend))
    assert replies(gw.backend)[1].startswith(
        f"Update on your task: [Task {task.id} (researcher) was cancelled"
    )


def test_an_interactive_worker_asks_the_user_and_continues_with_the_answer(
    gateway: LocalGateway, script: Script
) -> None:
    gw = gateway
    say(gw.backend, "e1", "Do this slow job: paint the fence")
    # Then the agent relays the worker's question
    wait_for(lambda: len(replies(gw.backend)) == 2, lambda: replies(gw.backend))
    task = only_task(gw)
    assert task.status == "waiting_user" and task.question == "Which colour should it be?"
    assert replies(gw.backend)[1].startswith(
        f"Update on your task: [Task {task.id} (worker) asks the user a question:"
    )
    # When the user answers, the agent hands the answer over and the worker finishes with it
    say(gw.backend, "e2", f"my answer: for task {task.id} green")
    wait_for(lambda: only_task(gw).outcome_delivered, lambda: (replies(gw.backend), only_task(gw)))
    done = only_task(gw)
    assert done.status == "done" and done.result is not None
    assert done.result.summary == f"Painted it as asked (my answer: for task {task.id} green)."
    wait_for(lambda: len(replies(gw.backend)) == 4, lambda: replies(gw.backend))
    assert "Painted it as asked" in replies(gw.backend)[3]
