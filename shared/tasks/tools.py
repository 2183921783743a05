"""The tools of delegation (docs/delegation.md).

For the agent the user talks to (ORCHESTRATOR_TOOLS; a task never gets them: depth 1):
- `delegate` starts a task of a role with a brief and returns its id at once; the turn answers
  without waiting, and the outcome comes back later as a message in this conversation;
- `answer_task` hands the user's answer to a task that asked them a question.

For a task agent (TASK_TOOLS, added to its role's allow-list by the runner):
- `finish_task` ends the task with its result (TaskResult's summary, findings with their sources,
  confidence): arguments that do not validate are an error result, and the model tries again;
- `ask_user` (interactive roles only) asks the user a question through the agent and waits.

A task's id is derived from the delegating turn and the tool call's id, so a turn retried after
its delegate call ran finds the task it made instead of starting a second one.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from shared import correlation
from shared.budgets import PriceTable, TurnBudget
from shared.errors import BadRequest, BudgetExceeded, Forbidden, NotFound, TaskCapReached
from shared.models import new_workspace
from shared.models.tasks import SUMMARY_MAX_CHARS, Finding, Task
from shared.tasks.items import step_item
from shared.tasks.roles import roles_for
from shared.tools.core import ToolContext, tool
from shared.tools.skill_draft import skill_draft

FINISH_TASK = "finish_task"
ASK_USER = "ask_user"


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str = Field(max_length=32, description="The task agent's role, e.g. 'researcher' or 'worker'.")
    brief: str = Field(
        min_length=1,
        max_length=8000,
        description="What the task agent is to do, with everything it needs: it sees nothing else of "
        "this conversation.",
    )


class TaskStarted(BaseModel):
    task_id: str
    role: str
    status: str
    note: str


def task_id_for(turn_id: str, call_id: str | None) -> str:
    """The same on every retry of the turn: its id and the model's id for the call."""
    return "tsk-" + hashlib.sha256(f"{turn_id}\n{call_id or ''}".encode()).hexdigest()[:28]


@tool
def delegate(args: DelegateArgs, ctx: ToolContext) -> TaskStarted:
    """Hand a piece of work to a task agent that runs on its own, and return at once with the
    task's id. Use it for research or work that takes many steps; do not wait for it: tell the user
    it has started. Its result comes back later as a message in this conversation."""
    backend, inbound = ctx.backend, ctx.inbound
    if backend.tasks is None or inbound is None:
        raise BadRequest("delegation is not available here")
    workspace = backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    if not workspace.delegation.enabled:
        raise Forbidden("this workspace does not delegate tasks")
    roles = roles_for(workspace)
    role = roles.get(args.role)
    if role is None:
        raise BadRequest(f"there is no role {args.role!r}; roles: {', '.join(sorted(roles))}")
    task_id = task_id_for(ctx.turn_id, ctx.call_id)
    task = backend.tasks.get(ctx.workspace_id, task_id)
    if task is None:
        # Charged before each of its model calls; one that starts already over budget is refused.
        budget = TurnBudget(backend.budgets, ctx.workspace_id, ctx.user_id, workspace.budget, PriceTable())
        if (denied := budget.check()).exhausted is not None:
            raise BudgetExceeded(f"No task started: {denied.exhausted.message(denied.at)}")
        now = ctx.now()
        draft = Task(
            id=task_id,
            workspace_id=ctx.workspace_id,
            session_id=ctx.session_id,
            role=args.role,
            brief=args.brief,
            parent=inbound,
            parent_turn_id=ctx.turn_id,
            correlation_id=correlation.current(),
            created_at=now,
            updated_at=now,
            deadline_at=now + timedelta(seconds=role.limits.max_wall_s),
        )
        try:
            task = backend.tasks.create(
                draft,
                max_per_session=workspace.delegation.max_active_per_session,
                max_per_workspace=workspace.delegation.max_active_per_workspace,
            )
        except TaskCapReached as exc:
            raise TaskCapReached(
                f"No task started: {exc.message} Wait for one to finish, or cancel one (/tasks)."
            ) from None
    # Submitted again on a retry: the lane drops the duplicate (its dedup id is the task's and seq's).
    backend.lanes.submit(step_item(task, 0))
    return TaskStarted(
        task_id=task.id,
        role=task.role,
        status=task.status,
        note="Started. Tell the user; the result arrives as a later message in this conversation.",
    )


class AnswerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(max_length=64, description="The id of the task that asked.")
    answer: str = Field(min_length=1, max_length=4000, description="The user's answer, as they gave it.")


@tool
def answer_task(args: AnswerArgs, ctx: ToolContext) -> str:
    """Give a task that asked the user a question the user's answer; the task then continues."""
    tasks = ctx.backend.tasks
    task = tasks.get(ctx.workspace_id, args.task_id) if tasks is not None else None
    if tasks is None or task is None or task.session_id != ctx.session_id:
        raise NotFound(f"no task {args.task_id!r} in this conversation")
    if task.status != "waiting_user":
        raise BadRequest(f"task {task.id} is not waiting for an answer (it is {task.status})")
    saved = tasks.save(task.model_copy(update={"answer": args.answer, "status": "running"}))
    ctx.backend.lanes.submit(step_item(saved, saved.invocations))
    return f"Answer passed to task {task.id}; it continues."


class FinishArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    summary: str = Field(
        min_length=1,
        max_length=SUMMARY_MAX_CHARS,
        description=f"What the task found or did, for the user, in at most {SUMMARY_MAX_CHARS} characters.",
    )
    findings: list[Finding] = Field(
        default_factory=list,
        max_length=20,
        description="Each finding with `sources`: the ids of the memories, messages or pages it rests on.",
    )
    confidence: float = Field(default=0.5, ge=0.0, le=1.0, description="How sure you are, 0 to 1.")


@tool(name=FINISH_TASK)
def finish_task(args: FinishArgs, ctx: ToolContext) -> str:
    """End this task with its result. Call it once, when the work is done."""
    return "Result recorded; the task is finished."


class AskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=1000, description="One clear question for the user.")


@tool(name=ASK_USER)
def ask_user(args: AskArgs, ctx: ToolContext) -> str:
    """Ask the user a question you cannot go on without; the task waits for the answer, which
    comes as the next message."""
    return "Question sent to the user; their answer comes as the next message."


ORCHESTRATOR_TOOLS = (delegate, answer_task)
# skill_draft (shared.tools.skill_draft) is offered only to a role that lists it: the Skill Composer.
TASK_TOOLS = (finish_task, ask_user, skill_draft)
