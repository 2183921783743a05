"""Controlling delegated tasks (docs/delegation.md#control): what `/tasks`, `sigil tasks` and the
console's tasks page share: finding a session's tasks, asking one to stop, and its spend.

Cancelling only sets `Task.cancel_requested` (TaskStore.save, retried when another writer moved
the record on: the task's own step saves it after each model and tool call); the task's runner
reads the flag before its next step and ends the task "cancelled", delivering that outcome once
like any other. A task already ended is left as it is.

A task's spend is its own (Task.usage.usd, charged to the parent user's and workspace's budgets
before each of its model calls); the parent's is the delegating turn's cost, read from the audit
log: the records of the turn `parent_turn_id`, which carry the same correlation id. The task's
own audit records (linked to the parent turn by that correlation id) are the child's, not the
parent's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

from shared.errors import NotFound, StaleTask
from shared.models import AuditRecord
from shared.models.budgets import as_utc, format_duration
from shared.models.tasks import Task
from shared.ports import AuditLog, TaskStore

# How many times a cancel reads the task again after losing a race with its runner's save.
CANCEL_TRIES: Final = 8
# The audit log is read newest first, up to this many records, to find the parent turn's.
AUDIT_SCAN: Final = 20_000
# How many of a session's tasks /tasks and `sigil tasks list` show, newest first.
LIST_LIMIT: Final = 20


@dataclass(frozen=True)
class Spend:
    """A task's spend (estimated USD at the price table's rates) and its parent turn's."""

    task_usd: Decimal
    parent_usd: Decimal | None  # None: no audit record of the parent turn was found
    parent_records: int = 0

    @property
    def total_usd(self) -> Decimal:
        return self.task_usd + (self.parent_usd or Decimal("0"))


def session_tasks(
    store: TaskStore, workspace_id: str, session_id: str, *, limit: int = LIST_LIMIT
) -> list[Task]:
    """The session's tasks, newest first."""
    return store.list_tasks(workspace_id, session_id=session_id, limit=limit)


def find_task(store: TaskStore, workspace_id: str, task_id: str, *, session_id: str | None = None) -> Task:
    """The task; with `session_id`, only if it is that session's (a chat user sees their own
    session's tasks, never another's: another's id is answered as unknown). NotFound otherwise."""
    task = store.get(workspace_id, task_id)
    if task is None or (session_id is not None and task.session_id != session_id):
        raise NotFound(f"no task {task_id[:64]}" + (" in this conversation" if session_id else ""))
    return task


def request_cancel(
    store: TaskStore, workspace_id: str, task_id: str, *, session_id: str | None = None
) -> tuple[Task, bool]:
    """Ask the task to stop: (the task as saved, True) once `cancel_requested` is stored, or (the
    task, False) when it had already ended. Retries on StaleTask: the runner saves the record
    after every step, so a cancel can lose the race a few times; it reads again and reapplies."""
    for _ in range(CANCEL_TRIES):
        task = find_task(store, workspace_id, task_id, session_id=session_id)
        if task.terminal:
            return task, False
        if task.cancel_requested:
            return task, True
        try:
            return store.save(task.model_copy(update={"cancel_requested": True})), True
        except StaleTask:
            continue
    raise StaleTask(f"task {task_id} kept changing: try the cancel again")


def parent_records(audit: AuditLog, task: Task, *, scan: int = AUDIT_SCAN) -> list[AuditRecord]:
    """The audit records of the turn that delegated `task` (its own records excluded)."""
    return [r for r in audit.list_records(task.workspace_id, limit=scan) if _is_parent(r, task)]


def _is_parent(record: AuditRecord, task: Task) -> bool:
    if record.turn_id != task.parent_turn_id:
        return False
    # The same turn id across workspaces is impossible; a correlation id, when both have one,
    # must agree too (a record of another request that reused the turn id is not the parent).
    return task.correlation_id is None or record.correlation_id in (None, task.correlation_id)


def spend(audit: AuditLog, task: Task, *, records: Iterable[AuditRecord] | None = None) -> Spend:
    """The task's spend and its parent turn's; `records`: the workspace's audit records, when the
    caller has read them already (the console's list, one read for every task)."""
    found = (
        [r for r in records if _is_parent(r, task)] if records is not None else parent_records(audit, task)
    )
    parent = sum((Decimal(str(r.cost_usd)) for r in found), Decimal("0")) if found else None
    return Spend(task_usd=task.usage.usd, parent_usd=parent, parent_records=len(found))


# ---------------------------------------------------------------- text


def usd(value: Decimal | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def age(task: Task, now: datetime) -> str:
    return format_duration(as_utc(now) - as_utc(task.created_at))


def status_of(task: Task) -> str:
    """The status, with a pending cancel said (the runner has not reached its next step yet)."""
    if task.cancel_requested and not task.terminal:
        return f"{task.status} (cancel requested)"
    return task.status


def line(task: Task, now: datetime) -> str:
    """ "tsk-1  researcher  running  3 min  $0.0123  Find the flights ..." """
    brief = " ".join(task.brief.split())
    brief = brief if len(brief) <= 60 else brief[:59] + "…"
    return f"{task.id}  {task.role}  {status_of(task)}  {age(task, now)}  {usd(task.usage.usd)}  {brief}"


def detail(task: Task, now: datetime, spent: Spend | None = None) -> list[str]:
    """The lines of `/tasks show` and `sigil tasks show`."""
    u = task.usage
    lines = [
        f"Task {task.id}: {task.role}, {status_of(task)}",
        f"Brief: {task.brief[:500]}",
        f"Started {age(task, now)} ago; {task.steps} steps in {task.invocations} invocations",
        f"Usage: {u.model_calls} model calls, {u.tool_calls} tool calls, "
        f"{u.tokens_in:,} tokens in, {u.tokens_out:,} out, est. {usd(u.usd)}",
    ]
    if spent is not None:
        parent = usd(spent.parent_usd) if spent.parent_usd is not None else "not in the audit log"
        lines.append(
            f"Spend: task est. {usd(spent.task_usd)}, parent turn {task.parent_turn_id} est. {parent}, "
            f"together est. {usd(spent.total_usd)}"
        )
    if task.question and task.status == "waiting_user":
        lines.append(f"Waiting for your answer to: {task.question[:500]}")
    if task.result is not None:
        lines.append(f"Result ({task.result.confidence:.0%} confident): {task.result.summary}")
        if task.result.scratchpad_keys:
            lines.append(f"Full output in the scratchpad: {', '.join(task.result.scratchpad_keys)}")
    if task.error:
        lines.append(f"Error: {task.error[:500]}")
    return lines


def as_json(task: Task, spent: Spend | None = None) -> dict[str, object]:
    """The task for `sigil tasks ... --json`: its record, and its spend when read."""
    data: dict[str, object] = task.model_dump(mode="json")
    if spent is not None:
        data["spend"] = {
            "task_usd": str(spent.task_usd),
            "parent_usd": None if spent.parent_usd is None else str(spent.parent_usd),
            "parent_records": spent.parent_records,
        }
    return data
