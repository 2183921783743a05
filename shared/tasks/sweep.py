"""The sweep of overdue tasks (docs/delegation.md, "The sweep"): what ends a task nothing else will.

A task ends in its own step (shared.tasks.runner), and a step that fails on every delivery ends it
in the runner's give-up. Two kinds of task escape both:

- a task whose step item died without its give-up running (every delivery was killed with its
  batch, and the item went to the lanes' dead-letter queue): it stays `running`, or `queued`;
- a task `waiting_user` (an interactive worker asked a question nobody answered): no step is
  queued for it at all.

So the periodic maintenance (the hourly consolidation schedule in the cloud, the local gateway's
hourly job) sweeps every workspace's active tasks: one not terminal whose `deadline_at` passed
more than GRACE ago is set `timed_out`, and its outcome goes to the parent's lane through the
runner's own `tell` (event id `task.<id>.outcome`), so the user hears of it once, as of any other
ending. The grace keeps the sweep off a step that is running now, just past the deadline; when
the two still meet, TaskStore.save's optimistic version decides: the sweep's save raises StaleTask
and the task is left to its step (the next sweep looks again), or the sweep's wins and the step,
saving after it, finds the task ended and keeps that ending (runner._end).

The list is TaskStore.list_tasks(active=True) per workspace, bounded by the workspace's cap on
active tasks (DelegationConfig.max_active_per_workspace, at most 1,000).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel

from shared.clock import utcnow
from shared.errors import StaleTask
from shared.tasks.runner import tell

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.tasks")

# Past its deadline, how long a task is left to a step that may be running it now.
GRACE: Final = timedelta(minutes=2)
# Active tasks read per workspace: the cap on active tasks can be no higher (max_active_per_workspace).
MAX_ACTIVE: Final = 1000


class SweepReport(BaseModel):
    """What one sweep did (counts only; the log names the tasks)."""

    workspaces: int = 0
    timed_out: int = 0  # ended by this sweep, and told
    raced: int = 0  # saved by another writer meanwhile (StaleTask): left to it
    errors: int = 0  # a workspace whose tasks could not be read or ended; the next sweep retries


def sweep_tasks(
    backend: Backend, *, clock: Callable[[], datetime] = utcnow, grace: timedelta = GRACE
) -> SweepReport:
    """End every overdue task of every workspace (module docstring); what it did."""
    report = SweepReport()
    tasks = backend.tasks
    if tasks is None:
        return report
    now = clock()
    for workspace in sorted(backend.workspaces.list_workspaces(), key=lambda w: w.id):
        report.workspaces += 1
        try:
            overdue = [
                t
                for t in tasks.list_tasks(workspace.id, active=True, limit=MAX_ACTIVE)
                if t.deadline_at + grace <= now
            ]
            for task in overdue:
                wall = int((task.deadline_at - task.created_at).total_seconds())
                try:
                    ended = tasks.save(
                        task.model_copy(
                            update={
                                "status": "timed_out",
                                "error": f"over its wall time of {wall} s (ended by the sweep, "
                                f"{task.status} past its deadline)",
                                "updated_at": now,
                            }
                        )
                    )
                except StaleTask:
                    report.raced += 1  # a step (or an answer, a cancel) saved it first: its turn
                    continue
                tell(backend, ended, now)
                report.timed_out += 1
                log.info(
                    "task timed out by the sweep",
                    extra={"workspace_id": task.workspace_id, "task_id": task.id, "was": task.status},
                )
        except Exception:  # one workspace's failure must not keep the others' tasks running
            log.exception("task sweep failed", extra={"workspace_id": workspace.id})
            report.errors += 1
    return report
