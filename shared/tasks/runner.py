"""A delegated task's steps (docs/delegation.md): one invocation of its agent loop, on its lane.

A step item (TaskEvent kind "step", on the task's own lane) runs the task's loop from its saved
steps (shared.agent.steps, keyed by the task's id) until it ends or the invocation's deadline is
near; then the task is saved (steps, invocations, usage) and the next step (seq + 1) is submitted
to its lane. So a task outlives any one invocation, and a crash or a redelivery continues from its
last saved step: no completed tool call runs again, no saved model call is made again. Progress
is counted early, since every process that dies under a batch costs each of its records one of
its deliveries: a delivery that finds steps an earlier (dead) delivery of its item saved counts
them and submits the next step at once, and a redelivered step does so after its first step; so
a task's step item is dead-lettered only after deliveries in a row that saved nothing.

Before each invocation the task is stopped, with its status saying why, when: a cancel was asked
(cancelled), its wall time is over (timed_out), its role's tool-call or token limit is reached
(failed), or the parent user's or workspace's budget is spent (budget_exhausted). Within an
invocation the budget is checked before every model call (the first too) and charged after it, in
the parent user's and workspace's counters, and settled in the store when the invocation ends.

The task runs as its role: the role's instructions and the brief; the role's tool allow-list as
the workspace's tools_allow (so the registry's permission check enforces it, within the
workspace's own allow / deny lists); the model its class maps to (roles.model_for); memory read
under the parent turn's recall scope, never a wider one. It never gets delegate (depth 1).

It ends with finish_task (the validated TaskResult) or a final text (the summary is that text,
cut to its bound). The full output (the text, the findings, a digest of every tool result) goes
to the session's scratchpad under `task/<id>`. Ending, in any terminal status, sends one outcome
item to the parent session's lane (shared.tasks.items); the parent's turn tells the user, and
marks the outcome delivered. Each invocation appends its own audit record, with the task's id,
the parent turn's id and the delegating request's correlation id.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shared.agent.audit import audit_record
from shared.agent.commit import settle
from shared.agent.loop import LoopResult, Safety, run_loop
from shared.agent.preflight import resolve
from shared.agent.steps import DurableSteps, redelivered
from shared.agent.turn import TurnDeps, owner_for, recall_scope_for, tools_for
from shared.clock import utcnow
from shared.deadline import before, current, deadline
from shared.errors import DeadlineExceeded, ModelNotConfigured, SigilError, StaleTask
from shared.models import (
    AssistantMessage,
    AuditRecord,
    InboundMessage,
    LaneItem,
    Message,
    RoleConfig,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.tasks import SUMMARY_MAX_CHARS, Finding, Task, TaskResult, TaskUsage
from shared.providers.base import ChatRequest
from shared.safety.injection import SYSTEM_PROMPT_NOTE
from shared.tasks.budget import TaskBudget, expected_call
from shared.tasks.items import outcome_item, question_item, step_item
from shared.tasks.roles import model_for, roles_for
from shared.tasks.tools import ASK_USER, FINISH_TASK, TASK_TOOLS, FinishArgs
from shared.tools import ToolContext, permitted

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.tasks")

# What an invocation keeps of its deadline to save the task and submit its next step.
SAVE_MARGIN_S = 2.0
# The orchestrator's own tools: never a task's, whatever its role lists (depth 1).
NEVER = frozenset({"delegate", "answer_task"})
DIGEST_CHARS = 2000  # of each tool result, in the scratchpad's full output
TASK_NOTE = (
    "You are a task agent working on your own, not talking with the user: nobody reads your text "
    "until the task ends. Work through your tools, then call finish_task once with a summary, "
    "your findings (each with the ids of what it rests on) and your confidence."
)


class _HandOver(Exception):
    """A redelivered step saved a step of its own: the next step item continues the task."""


@dataclass(frozen=True)
class TaskRunner:
    """shared.agent.turn.TaskSteps for the composition roots."""

    def run(self, deps: TurnDeps, item: LaneItem) -> AuditRecord:
        return run_step(deps, item)

    def give_up(self, deps: TurnDeps, item: LaneItem, last_error: str | None) -> AuditRecord | None:
        tasks, event = deps.backend.tasks, item.task
        task = tasks.get(item.inbound.workspace_id, event.task_id) if tasks and event else None
        if task is None:
            return None
        if not task.terminal:
            task = _end(
                deps, task, "failed", error=f"its step failed on every delivery: {last_error or ''}"[:500]
            )
        _tell(deps, task)
        return None

    def told(self, deps: TurnDeps, item: LaneItem) -> None:
        tasks, event = deps.backend.tasks, item.task
        for _ in range(3):  # a step's save may race this one: read again and retry
            task = tasks.get(item.inbound.workspace_id, event.task_id) if tasks and event else None
            if tasks is None or task is None or task.outcome_delivered:
                return
            try:
                tasks.save(task.model_copy(update={"outcome_delivered": True, "updated_at": utcnow()}))
                return
            except StaleTask:
                continue

    def note(self, deps: TurnDeps, workspace: WorkspaceConfig, inbound: InboundMessage) -> str:
        tasks = deps.backend.tasks
        if tasks is None:
            return ""
        waiting = [
            t
            for t in tasks.list_tasks(workspace.id, session_id=inbound.session_id, active=True)
            if t.status == "waiting_user"
        ]
        safety = Safety(pii=workspace.pii_redaction)
        return "".join(
            f"Task {t.id} ({t.role}) is waiting for the user's answer to its question: "
            f"{safety.guard(t.question or '', source=f'task {t.id}', quote_all=True)}\n"
            "If the user's message answers it, call answer_task with the task's id and the answer.\n"
            for t in waiting
        )


@dataclass
class _Invocation:
    """One invocation of a task: what its loop, its end and its audit record share."""

    deps: TurnDeps
    item: LaneItem
    task: Task
    role: RoleConfig
    workspace: WorkspaceConfig
    user_id: str
    steps: DurableSteps
    budget: TaskBudget
    started: float
    model_ref: str = ""


def run_step(deps: TurnDeps, item: LaneItem) -> AuditRecord:
    started = time.monotonic()
    backend, event = deps.backend, item.task
    assert event is not None
    tasks, steps_log = backend.tasks, backend.steps
    if tasks is None or steps_log is None:
        raise SigilError("a task's step reached a backend with no task store")
    task = tasks.get(item.inbound.workspace_id, event.task_id)
    if task is None or task.status == "waiting_user":
        return _skipped(task, item, started)  # gone, or waiting for the user
    if task.terminal:
        _tell(deps, task)  # a crash between the end and the outcome's submit, whatever the step
        return _skipped(task, item, started)
    if event.seq < task.invocations:
        if event.seq == task.invocations - 1:
            # This step's invocation was counted (_save_usage) and its process died before the
            # task ended or its next step was submitted: submit that step (the lane drops it when
            # it was submitted); it ends the task from its saved steps, or continues it.
            backend.lanes.submit(step_item(task, task.invocations))
        return _skipped(task, item, started)  # a redelivered older step
    workspace, sender = resolve(backend, task.parent, deps.clock())
    role = roles_for(workspace).get(task.role)
    if (stop := _stopped(task, role)) is not None:
        _tell(deps, _end(deps, task, stop[0], error=stop[1]))
        return _skipped(task, item, started)
    assert role is not None
    task = tasks.save(task.model_copy(update={"status": "running", "updated_at": utcnow()}))
    steps = DurableSteps(steps_log, task.workspace_id, task.id)
    # Steps an earlier delivery of this item saved and never counted: it died before its end.
    uncounted = len(steps.saved) > task.steps and _last_tool(steps.saved) not in {FINISH_TASK, ASK_USER}
    if task.answer is not None:  # the user's answer to its question, as the next step
        answer_id = f"{task.id}.answer{task.invocations}"
        if not any(m.id == answer_id for m in steps.saved):
            # The user's words, relayed by the agent: scanned and redacted like any user message.
            said = Safety(pii=workspace.pii_redaction).guard(task.answer, source="the user")
            steps.record(UserMessage(id=answer_id, content=said))
        task = tasks.save(task.model_copy(update={"answer": None, "question": None}))
    budget = TaskBudget(
        backend.budgets,
        task.workspace_id,
        sender.user_id,
        workspace.budget,
        deps.prices,
        deps.clock,
        expected=expected_call(task.usage),
    )
    run = _Invocation(deps, item, task, role, workspace, sender.user_id, steps, budget, started)
    if uncounted:
        # Counted now, before anything else can die: the progress sticks and the next step item
        # continues it with deliveries of its own (see _HandOver), however often this one is cut.
        return _hand_over(run)
    result: LoopResult | None = None
    try:
        if _last_tool(steps.saved) not in {FINISH_TASK, ASK_USER}:
            with deadline(before(current(), SAVE_MARGIN_S)):
                result = _loop(run)
    except ModelNotConfigured as exc:
        # No model for the role's class: retrying cannot help; the task fails and the user is told.
        run.task = _save_usage(run)
        _tell(deps, _end(deps, run.task, "failed", error=exc.message))
        return _audit(run, None, "model_not_configured")
    except (DeadlineExceeded, _HandOver):
        # Near the invocation's end (or a call cut by it), or a redelivery that made progress:
        # save, and continue in the next step item. A step item is delivered at most
        # maxReceiveCount times, and every process that dies under a batch (a Lambda sandbox
        # killed, a timeout) costs each of its records one: a long step redelivered again and
        # again would be dead-lettered with its progress saved but never counted, and the
        # runner's give-up not run (the last delivery died too). Handing over after a step
        # counts that progress and gives the rest of the task a fresh item's deliveries.
        return _hand_over(run)
    finally:
        settle(budget)
    run.task = _save_usage(run)
    if run.task.terminal:
        # Ended while this invocation ran (the sweep timed it out past its deadline): that ending
        # stands, and is told once; this invocation's usage is counted all the same.
        _tell(deps, run.task)
        return _audit(run, result, None)
    _finish(run, result)
    return _audit(run, result, None)


def _hand_over(run: _Invocation) -> AuditRecord:
    """This invocation counted (its steps, its usage), and the task's next step item submitted."""
    run.task = _save_usage(run)
    run.deps.backend.lanes.submit(step_item(run.task, run.task.invocations))
    return _audit(run, None, "ok")


def _loop(run: _Invocation) -> LoopResult:
    deps, task, role, workspace = run.deps, run.task, run.role, run.workspace
    provider, model = deps.provider_factory(_model_ref(workspace, task.role))
    run.model_ref = f"{provider.name}/{model}"
    scope = recall_scope_for(deps.backend, workspace, task.parent, run.user_id)
    safety = Safety(pii=workspace.pii_redaction)
    allowed = [t for t in role.tools if t not in NEVER and permitted(workspace, t)]
    allowed += [FINISH_TASK, *([ASK_USER] if role.interactive else [])]
    # The role's allow-list as the workspace's: the registry's permission check enforces it.
    as_role = workspace.model_copy(
        update={"tools_allow": allowed, "max_tool_calls_per_turn": role.limits.max_tool_calls}
    )
    registry = tools_for(deps, workspace).extended(*(t for t in TASK_TOOLS if t.name not in deps.tools))
    offered = sorted((s for s in registry.specs() if s.name in allowed), key=lambda s: s.name)
    brief = UserMessage(id=f"{task.id}.u", content=safety.guard(task.brief, source="the brief"))
    request = ChatRequest(
        model=model,
        system="\n\n".join(p for p in (role.instructions, TASK_NOTE, SYSTEM_PROMPT_NOTE) if p),
        messages=[brief],
        tools=offered,
    )
    ctx = ToolContext(
        workspace_id=task.workspace_id,
        session_id=task.session_id,
        user_id=run.user_id,
        turn_id=task.id,
        backend=deps.backend,
        scope=scope,
        owner=owner_for(task.parent, run.user_id),
        now=deps.clock,
        inbound=task.parent,
    )
    steps = run.steps
    resumed_at, again = len(steps.saved), redelivered.get()

    def finished() -> bool:
        if _last_tool(steps.saved) in {FINISH_TASK, ASK_USER} or _cancel_asked(deps, task):
            return True
        if again and len(steps.saved) > resumed_at:
            raise _HandOver
        return False

    return run_loop(
        provider,
        request,
        registry,
        ctx,
        as_role,
        safety=safety,
        budget=run.budget,
        steps=steps,
        # A cancel asked meanwhile ends it between steps, not only at the next invocation; a
        # redelivery hands over after its first step (_HandOver).
        finished=finished,
        check_first=True,
    )


def _model_ref(workspace: WorkspaceConfig, role: str) -> str | None:
    """The role's class's model, else the workspace's; None: the gateway's default, which the
    provider factory resolves (as for a turn), or ModelNotConfigured."""
    try:
        return model_for(workspace, role)
    except ModelNotConfigured:
        return None


def _cancel_asked(deps: TurnDeps, task: Task) -> bool:
    fresh = deps.backend.tasks.get(task.workspace_id, task.id) if deps.backend.tasks else None
    return fresh is not None and fresh.cancel_requested


def _stopped(task: Task, role: RoleConfig | None) -> tuple[str, str] | None:
    if task.cancel_requested:
        return "cancelled", "cancelled on request"
    if role is None:
        return "failed", f"the role {task.role!r} is no longer configured"
    if utcnow() >= task.deadline_at:
        return "timed_out", f"over its wall time of {role.limits.max_wall_s} s"
    if task.usage.tool_calls >= role.limits.max_tool_calls:
        return "failed", f"reached its role's limit of {role.limits.max_tool_calls} tool calls"
    if task.usage.tokens_in + task.usage.tokens_out >= role.limits.max_tokens:
        return "failed", f"reached its role's limit of {role.limits.max_tokens} tokens"
    return None


def _finish(run: _Invocation, result: LoopResult | None) -> None:
    """After a loop that ended: the task's end (or its question), told on the parent's lane."""
    deps, task, steps = run.deps, run.task, run.steps
    tasks = deps.backend.tasks
    assert tasks is not None
    if _cancel_asked(deps, task):
        _tell(
            deps,
            _end(
                deps, tasks.get(task.workspace_id, task.id) or task, "cancelled", error="cancelled on request"
            ),
        )
        return
    last = _last_tool(steps.saved)
    if last == ASK_USER:
        question = str(_call_args(steps.saved, ASK_USER).get("question", ""))[:1000]
        task = tasks.save(task.model_copy(update={"status": "waiting_user", "question": question}))
        deps.backend.lanes.submit(question_item(task, pii=run.workspace.pii_redaction))
        return
    if result is not None and result.budget_denied is not None:
        _tell(deps, _end(deps, task, "budget_exhausted", error=result.budget_denied))
        return
    if result is not None and result.stopped is not None:
        _tell(deps, _end(deps, task, "failed", error=result.stopped.message))
        return
    if last == FINISH_TASK:
        summary, findings, confidence = _finished(_call_args(steps.saved, FINISH_TASK))
    else:
        reply = steps.answered()
        text = reply.content if reply is not None else ""
        summary, findings, confidence = (text or "(no answer)")[:SUMMARY_MAX_CHARS], [], 0.5
    key, pad = f"task/{task.id}", deps.backend.scratchpad
    if pad is not None:
        pad.put(task.workspace_id, task.session_id, key, full_output(steps.saved, findings))
    outcome = TaskResult(
        summary=summary,
        findings=findings,
        confidence=confidence,
        usage=task.usage,
        scratchpad_keys=[key] if pad is not None else [],
    )
    _tell(deps, _end(deps, task, "done", result=outcome))


def _finished(arguments: dict[str, Any]) -> tuple[str, list[Finding], float]:
    """finish_task's result from its saved arguments. The registry validated them as the model
    wrote them; the saved copy is redacted, which may lengthen the text: then it is cut."""
    try:
        args = FinishArgs.model_validate(arguments)
    except ValidationError:
        return str(arguments.get("summary", ""))[:SUMMARY_MAX_CHARS] or "(no summary)", [], 0.5
    return args.summary, args.findings, args.confidence


def full_output(steps: list[Message], findings: list[Finding]) -> str:
    """What the scratchpad keeps of a task: its text, its findings and a digest of each tool result."""
    parts: list[str] = []
    for m in steps:
        if isinstance(m, AssistantMessage) and m.content:
            parts.append(m.content)
        elif isinstance(m, ToolResultMessage):
            parts.append(f"[{m.name}{' (error)' if m.is_error else ''}] {m.content[:DIGEST_CHARS]}")
    for f in findings:
        parts.append(f"Finding: {f.text} (sources: {', '.join(f.sources) or 'none'})")
    return "\n\n".join(parts)


def _end(
    deps: TurnDeps, task: Task, status: str, *, error: str | None = None, result: TaskResult | None = None
) -> Task:
    """Set `task` terminal (whatever another writer did first: a cancel is the one that races).
    A task that has ended keeps its first ending: the sweep (shared.tasks.sweep) may time out a
    task whose step was still running, and the step's save then reads it ended."""
    tasks = deps.backend.tasks
    assert tasks is not None
    for _ in range(3):
        if task.terminal:
            return task
        try:
            return tasks.save(
                task.model_copy(
                    update={"status": status, "error": error, "result": result, "updated_at": utcnow()}
                )
            )
        except StaleTask:
            fresh = tasks.get(task.workspace_id, task.id)
            if fresh is None or fresh.terminal:
                return fresh or task
            task = fresh
    raise StaleTask(f"task {task.id} kept changing while it was ending")


def _tell(deps: TurnDeps, task: Task) -> None:
    tell(deps.backend, task, deps.clock())


def tell(backend: Backend, task: Task, now: datetime) -> None:
    """The outcome on the parent's lane: once (its event id is derived from the task's). The
    runner's, and the sweep's (shared.tasks.sweep) for a task it ends."""
    if task.terminal and not task.outcome_delivered:
        workspace, _ = resolve(backend, task.parent, now)
        backend.lanes.submit(outcome_item(task, pii=workspace.pii_redaction))


def _save_usage(run: _Invocation) -> Task:
    """The task with this invocation counted: its steps, its usage (what the budget charged)."""
    task, saved, spent = run.task, run.steps.saved, run.budget.spent
    usage = TaskUsage(
        model_calls=task.usage.model_calls + run.budget.model_calls,
        tool_calls=sum(isinstance(m, ToolResultMessage) for m in saved),
        tokens_in=task.usage.tokens_in + spent.tokens_in,
        tokens_out=task.usage.tokens_out + spent.tokens_out,
        usd=task.usage.usd + spent.usd,
    )
    update = {"steps": len(saved), "invocations": task.invocations + 1, "usage": usage}
    tasks = run.deps.backend.tasks
    assert tasks is not None
    for _ in range(3):
        try:
            return tasks.save(task.model_copy(update={**update, "updated_at": utcnow()}))
        except StaleTask:
            fresh = tasks.get(task.workspace_id, task.id)
            if fresh is None:
                raise
            # A cancel asked meanwhile is kept (the next step stops on it); the rest is this run's.
            task = fresh
    raise StaleTask(f"task {task.id} kept changing while it was saved")


def _last_tool(steps: list[Message]) -> str | None:
    """finish_task or ask_user, when the last step's results hold one that ran (not an error);
    otherwise the last result's tool name, or None when the last step is no tool result."""
    names = []
    for m in reversed(steps):
        if not isinstance(m, ToolResultMessage):
            break
        names.append(m.name if not m.is_error else None)
    ending = [n for n in names if n in {FINISH_TASK, ASK_USER}]
    return ending[0] if ending else (names[0] if names else None)


def _call_args(steps: list[Message], name: str) -> dict[str, Any]:
    for m in reversed(steps):
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                if call.name == name:
                    loaded = json.loads(call.arguments or "{}")
                    return loaded if isinstance(loaded, dict) else {}
    return {}


def _skipped(task: Task | None, item: LaneItem, started: float) -> AuditRecord:
    return AuditRecord(
        workspace_id=item.inbound.workspace_id,
        session_id=item.inbound.session_id,
        turn_id=f"{item.task.task_id}.{item.task.seq}" if item.task else "task",
        outcome="skipped_duplicate",
        duration_ms=round((time.monotonic() - started) * 1000, 3),
        correlation_id=item.correlation_id,
        task_id=item.task.task_id if item.task else None,
        parent_turn_id=task.parent_turn_id if task else None,
    )


def _audit(run: _Invocation, result: LoopResult | None, outcome: str | None) -> AuditRecord:
    """This invocation's own record, linked to the parent turn (its id, the correlation id)."""
    task, item = run.task, run.item
    assert item.task is not None
    record = audit_record(
        item.inbound,
        f"{task.id}.{item.task.seq}",
        run.started,
        outcome or (result.outcome if result is not None else "ok"),  # type: ignore[arg-type]
        user_id=run.user_id,
        model=run.model_ref or None,
        loop=result,
        budget=run.budget,
    )
    record = record.model_copy(
        update={
            "event_id": None,
            "correlation_id": task.correlation_id,
            "task_id": task.id,
            "parent_turn_id": task.parent_turn_id,
        }
    )
    run.deps.backend.audit.append(record)
    return record
