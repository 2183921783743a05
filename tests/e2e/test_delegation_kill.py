"""A Worker's side effects across a killed `sigil dev` (issue 29): the process is SIGKILLed in the
middle of a delegated task, after two of its three side-effecting tool calls ran and their results
were saved; the gateway restarts on the same data directory, the lane delivers the task's step
again, and the task finishes from its saved steps: each side effect happened once, and the user
is told once, in the conversation that asked.

The model is the fake OpenAI server, scripted from the request (the agent delegates; the worker
sets three reminders with the `schedule` tool, then calls finish_task); the side effect counted is
the schedules stored.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.config import Settings
from shared.tasks.runner import TASK_NOTE
from tests.e2e.conftest import REPLY_TIMEOUT_S, DevGateway, gateway_env, wait_until
from tests.support.consolidation import is_consolidation
from tests.support.fake_openai import FakeOpenAI, FakeReply, Json

BILLS = 3


class Worker:
    """The scripted model, and the kill it does once (from the fake server's thread)."""

    def __init__(self) -> None:
        self.gateway: DevGateway | None = None
        self.killed = threading.Event()

    def __call__(self, body: Json) -> str | FakeReply:
        if is_consolidation(body):
            return "[]"  # the per-turn extraction's call: nothing to learn here
        messages: list[dict[str, Any]] = body["messages"]
        system = str(messages[0].get("content", "")) if messages[0]["role"] == "system" else ""
        last = messages[-1]
        if TASK_NOTE not in system:
            if last["role"] == "tool":
                return "Started."
            text = str(last.get("content"))
            if text.startswith("[Task "):
                return "Told: " + text.splitlines()[0][:60]
            return FakeReply(
                tool_calls=[("delegate", {"role": "worker", "brief": f"Set {BILLS} bill reminders"})]
            )
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 2 and not self.killed.is_set():
            # The process dies after the second reminder's result was saved, before this call ends.
            assert self.gateway is not None and self.gateway.proc is not None
            os.killpg(self.gateway.proc.pid, signal.SIGKILL)
            self.killed.set()
            return "never read"
        if done < BILLS:
            at = f"2030-01-0{done + 1}T09:00"
            return FakeReply(
                tool_calls=[("schedule", {"text": f"bill {done + 1}", "at": at, "timezone": "UTC"})]
            )
        return FakeReply(
            tool_calls=[("finish_task", {"summary": f"Set {BILLS} reminders.", "confidence": 0.9})]
        )


@pytest.fixture
def worker() -> Worker:
    return Worker()


@pytest.fixture
def fake(worker: Worker) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as served:
        served.set_default(worker)
        yield served


def test_a_killed_gateway_finishes_the_task_with_each_side_effect_once(
    tmp_path: Path, fake: FakeOpenAI, worker: Worker
) -> None:
    data_dir = tmp_path / "state"
    gw = DevGateway(data_dir, gateway_env(fake) | {"SIGIL_PROVIDER_MAX_RETRIES": "0"})
    worker.gateway = gw
    gw.start()
    try:
        # When the user asks for work the agent delegates to a worker
        gw.post("Please set my bill reminders", event_id="evt-1")
        # And the gateway is killed mid-task: the task runs on its own lane, so the kill may come
        # before the delegating turn's reply is read (or even committed: its redelivery then finds
        # the task it made, by its id, and answers the same)
        assert worker.killed.wait(REPLY_TIMEOUT_S)
        assert gw.proc is not None
        gw.proc.wait()
        # When it starts again on the same data directory
        gw.start()
        # Then the delegating turn's answer stands, the task finishes and the user is told, once
        replies = [r["text"] for r in gw.wait_replies(2)]
        assert replies[0] == "Started." and replies[1].startswith("Told: [Task ")
        assert wait_until(lambda: len(gw.outbox()) == 2, timeout=5) and len(gw.outbox()) == 2
    finally:
        gw.stop()
    # And each reminder was set once: the two saved before the kill were not set again
    backend = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        assert backend.schedules is not None and backend.tasks is not None
        texts = sorted(s.text for s in backend.schedules.list_schedules("default"))
        assert texts == [f"bill {n}" for n in range(1, BILLS + 1)]
        (task,) = backend.tasks.list_tasks("default")
        assert task.status == "done" and task.outcome_delivered
        assert task.result is not None and task.result.summary == f"Set {BILLS} reminders."
    finally:
        backend.close()
    # And the worker's model saw each tool result once, in order, in its last request
    last_worker = [r for r in fake.requests if TASK_NOTE in json.dumps(r["messages"][:1])][-1]
    results = [m["content"] for m in last_worker["messages"] if m["role"] == "tool"]
    assert len(results) == BILLS
