"""The maintenance run: its phases in order, a checkpoint after each, a stop before the deadline.

Imported by the runner only when maintenance runs: the phases pull in numpy, which a
CompactionDue never needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Final

from shared.clock import utcnow
from shared.consolidation.deadline import Deadline
from shared.consolidation.maintenance.checkpoint import load_checkpoint
from shared.consolidation.maintenance.context import Run
from shared.consolidation.maintenance.finish import finish
from shared.consolidation.maintenance.policy import DEFAULT_POLICY, MaintenancePolicy
from shared.consolidation.maintenance.report import MaintenanceReport, PhaseResult, Stage
from shared.consolidation.maintenance.scopes import backfill_scopes
from shared.consolidation.maintenance.scoring import score
from shared.consolidation.maintenance.vectors import reembed

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.consolidation.maintenance")

# A phase gets the run and, when the run resumes in it, the cursor its checkpoint saved.
Phase = Callable[[Run, str | None], PhaseResult]
PHASES: Final[tuple[tuple[Stage, Phase], ...]] = (
    ("scopes", backfill_scopes),
    ("score", score),
    ("finish", finish),
    ("messages", reembed),
)


def run_maintenance(
    backend: Backend,
    workspace_id: str,
    *,
    run_id: str,
    deadline: Deadline | None = None,
    clock: Callable[[], datetime] = utcnow,
    policy: MaintenancePolicy = DEFAULT_POLICY,
) -> MaintenanceReport:
    """One maintenance run over `workspace_id`'s facts (shared.consolidation.maintenance).

    `run_id` is recorded on every lifecycle change (rollback_run undoes them); `deadline` bounds
    the run (it stops between units of work and leaves a checkpoint); `clock` is the time decay
    is measured against. The caller holds the workspace's consolidation lease. The workspace's
    memory config adds its per-scope decay to `policy`.
    """
    started = time.perf_counter()
    policy = policy.for_workspace(backend.workspaces.get(workspace_id))
    run = Run(backend, workspace_id, run_id, deadline or Deadline.never(), clock(), policy)
    saved = load_checkpoint(backend, workspace_id)
    resume = saved if saved is not None and saved.phase != "done" else None
    report = MaintenanceReport(workspace_id=workspace_id, run_id=run_id, resumed=resume is not None)
    first = next((i for i, (stage, _) in enumerate(PHASES) if resume and stage == resume.phase), 0)
    for i, (stage, phase) in enumerate(PHASES[first:], start=first):
        result = phase(run, resume.after if resume is not None and i == first else None)
        report.add(result)
        if result.stopped:
            run.checkpoint(stage, result.after)
            report.stopped_in = stage
            report.duration_s = time.perf_counter() - started
            log.info(
                "maintenance stopped at its deadline", extra={"workspace_id": workspace_id, "phase": stage}
            )
            return report
        run.checkpoint(PHASES[i + 1][0] if i + 1 < len(PHASES) else None)
    report.complete = True
    report.duration_s = time.perf_counter() - started
    log.info("maintenance done", extra={"workspace_id": workspace_id, **report.metrics()})
    return report
