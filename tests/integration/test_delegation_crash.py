"""A task through crashes and budgets (issue 29), on the embedded backend: the lanes' items are run
by hand (run_turn, as the lane worker and the agent's batch do), so a test can kill an attempt at
a chosen point and deliver the item again.

- a Worker's side-effecting tool runs its effect once per call although the process dies mid-task:
  after a tool call ran but before its result was saved (the call runs again; its effect is keyed
  on the task and the call, ToolContext.turn_id and call_id), and after its result was saved
  (the call does not run again: the StepLog holds its result);
- a task that would take the user's budget past its limit stops before that model call, and the
  user is told.

Both backends: the embedded one and the cloud one on moto.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from shared.adapters.embedded import build_embedded_backend
from shared.agent.steps import redelivered
from shared.agent.turn import TurnDeps, give_up_turn, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import (
    BudgetLimits,
    InboundMessage,
    LaneItem,
    RoleConfig,
    ScopeLimits,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.tasks import Task
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider
from shared.tasks.items import outcome_item, step_item
from shared.tasks.runner import TASK_NOTE, TaskRunner
from shared.tasks.tools import ORCHESTRATOR_TOOLS
from shared.tools import ToolContext, default_registry, tool
from tests.support.moto_aws import contract_backend

WS = "ws1"
SESSION = "web.s1"


# The cloud lane's drain (SQS FIFO), for the test reading what reached it; empty when embedded.
DRAIN: list[Callable[[int], list[LaneItem]]] = []


def outcomes_submitted(backend: Backend, task: Task) -> int:
    """How many outcome items of `task` a second submission leaves on the parent's lane."""
    again = backend.lanes.submit(outcome_item(task, pii=False))
    if not DRAIN:  # the embedded lane says so at once
        return 1 if again.status == "duplicate" else 2
    # SQS FIFO takes a duplicate with a 200 and drops it: count what is there.
    return sum(1 for i in DRAIN[0](100) if i.task is not None and i.task.kind == "outcome")


class Killed(BaseException):
    """The process dying: no `except Exception` on the way stops it, as none stops a SIGKILL."""


class PayArgs(BaseModel):
    amount: int


class Ledger:
    runs: list[str] = []  # each call id, every time the tool's body ran
    effects: dict[tuple[str, str], int] = {}  # (task, call) -> the payment made, once
    kill_in_tool: set[str] = set()  # call ids that die after their effect, on their first run
    # Units of work (a model call, a payment) the current delivery may do before its process
    # dies; None: no limit.
    units: int | None = None


def spend_unit() -> None:
    """One unit of the delivery's work (Ledger.units); the process dies when none is left."""
    if Ledger.units is not None:
        if Ledger.units <= 0:
            raise Killed
        Ledger.units -= 1


@tool
def pay(args: PayArgs, ctx: ToolContext) -> str:
    """Pays an amount (a side effect, keyed on the task and the call so a re-run pays nothing)."""
    call_id = ctx.call_id or ""
    spend_unit()
    Ledger.runs.append(call_id)
    Ledger.effects.setdefault((ctx.turn_id, call_id), args.amount)
    if call_id in Ledger.kill_in_tool:
        Ledger.kill_in_tool.discard(call_id)
        raise Killed  # after the effect, before the loop saves the result
    return f"paid {args.amount}"


def call(name: str, args: dict[str, object], call_id: str) -> list[ProviderEvent]:
    return [ToolCallEvent(call=ToolCall(id=call_id, name=name, arguments=json.dumps(args)))]


class Script:
    def __init__(self) -> None:
        self.kill_before_model_call_after: set[int] = set()  # kill when this many results are saved

    def __call__(self, request: ChatRequest) -> list[ProviderEvent]:
        return [*self.answer(request), Usage(input_tokens=400, output_tokens=100), Done()]

    def answer(self, request: ChatRequest) -> list[ProviderEvent]:
        last = request.messages[-1]
        if TASK_NOTE not in request.system:
            if isinstance(last, UserMessage) and last.content.startswith("[Task "):
                return [TextDelta(text=f"Told: {last.content.splitlines()[0][:80]}")]
            if isinstance(last, ToolResultMessage):
                return [TextDelta(text="Started.")]
            return call("delegate", {"role": "payer", "brief": last.content}, "d1")
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if len(results) in self.kill_before_model_call_after:
            self.kill_before_model_call_after.discard(len(results))
            raise Killed  # after the step's results were saved, before the next model call
        if len(results) < 3:
            n = len(results) + 1
            return call("pay", {"amount": n * 10}, f"p{n}")
        return call("finish_task", {"summary": "Paid three bills.", "confidence": 0.9}, "fin")


@pytest.fixture(params=["embedded", "aws"])
def backend(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Both backends: the embedded one, and the cloud one on moto (with the embedded index)."""
    Ledger.runs, Ledger.effects, Ledger.kill_in_tool, Ledger.units = [], {}, set(), None
    if request.param == "aws":
        with contract_backend(tmp_path) as (cloud_backend, drain):
            DRAIN[:] = [drain]
            yield cloud_backend
        return
    DRAIN.clear()
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


def deps_for(backend: Backend, tmp_path: Path, script: Script) -> TurnDeps:
    provider = FunctionProvider(script)
    return TurnDeps(
        backend=backend,
        settings=Settings(data_dir=tmp_path),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        tools=default_registry().extended(pay, *ORCHESTRATOR_TOOLS),
        task_steps=TaskRunner(),
    )


def workspace(budget: BudgetLimits | None = None) -> WorkspaceConfig:
    config = WorkspaceConfig(id=WS, budget=budget)
    roles = {"payer": RoleConfig(instructions="Pay the bills.", tools=["pay"])}
    return config.model_copy(update={"delegation": config.delegation.model_copy(update={"roles": roles})})


def user_item(event_id: str, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1"),
            chat_id="s1",
            text=text,
        )
    )


def the_task(backend: Backend) -> Task:
    assert backend.tasks is not None
    (task,) = backend.tasks.list_tasks(WS)
    return task


def replies(backend: Backend) -> list[str]:
    return [e.message.text for e in backend.outbox.read(WS, SESSION)]


def deliver_until_done(deps: TurnDeps, backend: Backend) -> int:
    """Deliver the task's current step again and again, as the lane does after a failure or with a
    continuation; a Killed attempt is a dead process, whose item comes back. Returns attempts."""
    for attempt in range(1, 20):
        task = the_task(backend)
        if task.terminal:
            return attempt - 1
        try:
            run_turn(deps, step_item(task, task.invocations))
        except Killed:
            continue
    raise AssertionError(f"the task never ended: {the_task(backend)}")


def test_a_workers_side_effects_happen_once_although_the_process_dies_mid_task(
    backend: Backend, tmp_path: Path
) -> None:
    backend.workspaces.put(workspace())
    script = Script()
    deps = deps_for(backend, tmp_path, script)
    # Given a delegated task whose worker pays three bills
    run_turn(deps, user_item("e1", "Pay my three bills"))
    assert replies(backend) == ["Started."]
    task = the_task(backend)
    # And a process that dies inside the first payment (after it paid), and again before the
    # model call that follows the second payment's saved result
    Ledger.kill_in_tool.add("p1")
    script.kill_before_model_call_after.add(2)
    # When the lane delivers the task's step until it ends
    attempts = deliver_until_done(deps, backend)
    # Then each bill was paid once
    assert Ledger.effects == {(task.id, "p1"): 10, (task.id, "p2"): 20, (task.id, "p3"): 30}
    # And only the call that died before its result was saved ran again; the saved ones never did
    assert Ledger.runs == ["p1", "p1", "p2", "p3"]
    # (five deliveries: each death's redelivery counts the steps saved before it and hands over
    # to the next step item at once, which goes on)
    assert attempts == 5
    done = the_task(backend)
    assert done.status == "done" and done.result is not None
    assert done.result.summary == "Paid three bills."
    # And its outcome reaches the parent's lane once: a second submission is dropped
    assert outcomes_submitted(backend, done) == 1
    # And the steps are kept (the scratchpad holds the output; a done task's steps expire)
    assert backend.steps is not None and len(backend.steps.load(WS, task.id)) == 8


def test_a_task_stops_before_the_model_call_that_would_pass_the_budget_and_the_user_is_told(
    backend: Backend, tmp_path: Path
) -> None:
    # Given a workspace with 2,300 tokens a day: the delegating turn spends 1,000 (two calls of
    # 500), each of the task's model calls 500
    backend.workspaces.put(workspace(BudgetLimits(workspace=ScopeLimits(tokens_per_day=2300))))
    script = Script()
    deps = deps_for(backend, tmp_path, script)
    run_turn(deps, user_item("e1", "Pay my three bills"))
    # When the task runs: 1,000 + 500 (first call) + 500 (second) = 2,000; a third would reach 2,500
    deliver_until_done(deps, backend)
    task = the_task(backend)
    # Then it stopped before that third call, with the budget's reason
    assert task.status == "budget_exhausted"
    assert task.usage.model_calls == 2 and Ledger.runs == ["p1", "p2"]
    assert task.error is not None and "token" in task.error
    # And the user is told, by the turn its outcome gets on the parent's lane
    record = run_turn(deps, outcome_item(task, pii=False))
    assert record.outcome == "ok" and record.event_id == f"task.{task.id}.outcome"
    assert replies(backend)[-1].startswith(f"Told: [Task {task.id} (payer) stopped: the budget ran out")
    assert the_task(backend).outcome_delivered
    # And once the budget is spent, an outcome's turn that cannot call the model still says it
    backend.workspaces.put(workspace(BudgetLimits(workspace=ScopeLimits(tokens_per_day=1000))))
    again = outcome_item(task, pii=False)
    again.inbound.event_id = f"task.{task.id}.outcome2"
    assert run_turn(deps, again).outcome == "budget_denied"
    assert replies(backend)[-1].startswith(f"Task {task.id} has ended (see /tasks).")


def test_a_step_dead_lettered_on_its_last_delivery_fails_the_task_and_the_user_is_told(
    backend: Backend, tmp_path: Path
) -> None:
    backend.workspaces.put(workspace())
    deps = deps_for(backend, tmp_path, Script())
    run_turn(deps, user_item("e1", "Pay my three bills"))
    task = the_task(backend)
    # When the lane gives up on the task's step (every delivery failed)
    assert give_up_turn(deps, step_item(task, 0), last_error="ProviderError: the model is down") is None
    # Then the task failed with the reason, no apology went out in the task's place, and its
    # outcome's turn tells the user
    failed = the_task(backend)
    assert failed.status == "failed" and failed.error is not None and "the model is down" in failed.error
    assert replies(backend) == ["Started."]
    run_turn(deps, outcome_item(failed, pii=False))
    assert replies(backend)[-1].startswith(f"Told: [Task {task.id} (payer) failed:")
    assert the_task(backend).outcome_delivered


class DyingScript(Script):
    """The task's process dies on each of its item's first `dead` deliveries before any model
    call (a hang and kills in the same batch, as bench/chaos.py --tasks makes them), and on every
    other delivery before its second model call: each delivery makes one step at most."""

    def __init__(self, dead: int) -> None:
        super().__init__()
        self.dead = dead
        self.calls = 0  # model calls of the task in the current delivery

    def answer(self, request: ChatRequest) -> list[ProviderEvent]:
        if TASK_NOTE in request.system:
            self.calls += 1
            if self.dead > 0 or self.calls > 1:
                self.dead = max(0, self.dead - 1)
                raise Killed
        return super().answer(request)


def deliver_as_sqs(deps: TurnDeps, backend: Backend, script: DyingScript, max_receives: int) -> int:
    """The task's step items as SQS delivers them: each at most `max_receives` times (then
    dead-lettered), with `redelivered` set as the agent's batch sets it from the record's
    ApproximateReceiveCount. Returns the deliveries of the item that delivered most."""
    receives: dict[int, int] = {}
    for _ in range(50):
        task = the_task(backend)
        if task.terminal:
            return max(receives.values())
        seq = task.invocations
        receives[seq] = receives.get(seq, 0) + 1
        if receives[seq] > max_receives:
            raise AssertionError(f"step {seq} dead-lettered: {task}")
        script.calls = 0
        token = redelivered.set(receives[seq] > 1)
        try:
            run_turn(deps, step_item(task, seq))
        except Killed:
            continue
        finally:
            redelivered.reset(token)
    raise AssertionError(f"the task never ended: {the_task(backend)}")


def test_a_task_whose_process_dies_on_every_delivery_goes_on_while_its_deliveries_make_progress(
    backend: Backend, tmp_path: Path
) -> None:
    backend.workspaces.put(workspace())
    script = DyingScript(dead=2)
    deps = deps_for(backend, tmp_path, script)
    # Given a delegated task of four model calls (three payments, then finish_task)
    run_turn(deps, user_item("e1", "Pay my three bills"))
    task = the_task(backend)
    # When its step's first two deliveries die before any model call, and every later delivery
    # dies before its second model call (one step a delivery), as a batch killed again and again
    deliveries = deliver_as_sqs(deps, backend, script, max_receives=5)
    # Then no step item reached SQS's fifth delivery: each redelivery that made a step handed the
    # rest to a fresh step item, so the task ended done, each bill paid once
    assert deliveries <= 3
    done = the_task(backend)
    assert done.status == "done" and done.invocations >= 2
    assert Ledger.effects == {(task.id, "p1"): 10, (task.id, "p2"): 20, (task.id, "p3"): 30}
    assert Ledger.runs == ["p1", "p2", "p3"]


class TwoAtOnce(Script):
    """A task that pays two bills with parallel calls, then finishes; each model call of the task
    spends one of the delivery's units of work (Ledger.units)."""

    def answer(self, request: ChatRequest) -> list[ProviderEvent]:
        if TASK_NOTE not in request.system:
            return super().answer(request)
        spend_unit()
        if any(isinstance(m, ToolResultMessage) for m in request.messages):
            return call("finish_task", {"summary": "Paid two bills.", "confidence": 0.9}, "fin")
        return [*call("pay", {"amount": 10}, "p1"), *call("pay", {"amount": 20}, "p2")]


def test_a_delivery_counts_the_steps_a_dead_delivery_of_its_item_saved_and_hands_over(
    backend: Backend, tmp_path: Path
) -> None:
    backend.workspaces.put(workspace())
    deps = deps_for(backend, tmp_path, TwoAtOnce())
    run_turn(deps, user_item("e1", "Pay my two bills"))
    task = the_task(backend)
    # When every delivery's process dies after one unit of work (a model call or a payment),
    # and the lane delivers each step item twice at most
    receives: dict[int, int] = {}
    for _ in range(20):
        current = the_task(backend)
        if current.terminal:
            break
        seq = current.invocations
        receives[seq] = receives.get(seq, 0) + 1
        assert receives[seq] <= 2, f"step {seq} dead-lettered: steps saved but never counted"
        Ledger.units = 1
        token = redelivered.set(receives[seq] > 1)
        try:
            run_turn(deps, step_item(current, seq))
        except Killed:
            pass
        finally:
            redelivered.reset(token)
    # Then each delivery after one that saved a step counted it and handed the rest to a fresh
    # item: the task ended done, each bill paid once
    done = the_task(backend)
    assert done.status == "done"
    assert Ledger.effects == {(task.id, "p1"): 10, (task.id, "p2"): 20}
