"""Durable steps in an ordinary turn (issue 29, item 3): a turn cut by the deadline after three of
its five tool calls continues from the fourth on the next delivery, and no completed tool call
runs again. Embedded backend (its SQLite StepLog) with a function-backed model.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from pydantic import BaseModel

from shared.agent.preflight import turn_id_for
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.deadline import current, deadline, passed
from shared.errors import DeadlineExceeded
from shared.models import InboundMessage, LaneItem, Sender, ToolCall, ToolResultMessage
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext, default_registry, tool

WS = "ws1"
SESSION = "web.s1"
WAIT_S = 30.0


class Step(BaseModel):
    n: int


RAN: list[int] = []


@tool
def step(args: Step, ctx: ToolContext) -> str:
    """Does step n of a job (counts its runs)."""
    RAN.append(args.n)
    if args.n == 3 and current() is not None:
        # The third call takes the rest of the turn's time: the deadline passes while it runs.
        end = time.monotonic() + WAIT_S
        while not passed(current()) and time.monotonic() < end:
            threading.Event().wait(0.02)
    return f"step {args.n} done"


def five_steps(request: ChatRequest) -> str | list[ProviderEvent]:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if not results:
        return [
            ToolCallEvent(call=ToolCall(id=f"c{n}", name="step", arguments=json.dumps({"n": n})))
            for n in range(1, 6)
        ]
    return "All five steps done: " + ", ".join(r.content for r in results)


@pytest.fixture(autouse=True)
def reset() -> None:
    RAN.clear()


def item() -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id="e1",
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1"),
            chat_id="s1",
            text="Do the five steps",
        )
    )


def test_a_turn_cut_after_three_of_five_tool_calls_continues_from_the_fourth(
    backend: Backend, settings: Settings
) -> None:
    provider = FunctionProvider(five_steps)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        tools=default_registry().extended(step),
    )
    # Given a turn whose model asks for five tool calls, and a deadline that passes during the third
    with pytest.raises(DeadlineExceeded), deadline(time.monotonic() + 3.0):
        run_turn(deps, item())
    # Then the first three ran, the fourth and fifth did not, and nothing was committed
    assert RAN == [1, 2, 3]
    assert backend.sessions.get(WS, SESSION) is None
    assert backend.steps is not None
    turn = turn_id_for(item())
    saved = backend.steps.load(WS, turn)
    assert [getattr(m, "content", "") for m in saved[1:]] == ["step 1 done", "step 2 done", "step 3 done"]

    # When the lane delivers the item again
    record = run_turn(deps, item())
    # Then the turn continued from the fourth call: each step ran exactly once, and the model was
    # not asked again for the calls it had made
    assert RAN == [1, 2, 3, 4, 5]
    assert len(provider.requests) == 2
    assert record.outcome == "ok"
    replies = [e.message.text for e in backend.outbox.read(WS, SESSION)]
    assert replies == ["All five steps done: " + ", ".join(f"step {n} done" for n in range(1, 6))]
    # And the committed window holds the one model step with its five results, in order
    session = backend.sessions.get(WS, SESSION)
    assert session is not None
    results = [m for m in session.active_messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3", "c4", "c5"]
    assert [m.id for m in results] == [f"{turn}.a1.r{i}" for i in range(5)]
    # And the steps are cleared once the turn is committed
    assert backend.steps.load(WS, turn) == []
