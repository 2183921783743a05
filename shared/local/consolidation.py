"""Consolidation on one machine: the local gateway's scheduler runs what EventBridge runs in the
cloud, with the same code (shared.consolidation.runner).

- CompactionDue (published by the turn into the SQLite bus) → compact that session;
- MaintenanceDue → one workspace's catch-up and maintenance;
- TurnCommitted (published by the turn with the workspace's debounce as its delay) → extract the
  turn's facts (shared.consolidation.turn_extraction);
- every hour → the sweep of overdue tasks (shared.tasks.sweep), then catch-up and maintenance of
  every workspace. The scheduler persists the job's last run, so an hour missed while the gateway
  was down is caught up once at the next start.

The scheduler runs events and jobs on one thread, so each run gets a deadline that keeps it from
holding the bus for long; what it leaves is picked up from its checkpoints by the next run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from shared import correlation
from shared.backend import Backend
from shared.clock import new_id
from shared.consolidation.deadline import Deadline
from shared.consolidation.runner import (
    ModelFactory,
    consolidate_workspace,
    run_compaction_due,
    run_hourly,
    run_id_for,
)
from shared.consolidation.turn_extraction import extract_turn
from shared.errors import ModelNotConfigured
from shared.lazy import once
from shared.models import DomainEvent
from shared.tasks.sweep import sweep_tasks

if TYPE_CHECKING:
    from shared.adapters.embedded import LocalScheduler

log = logging.getLogger("sigil.consolidation")

HOURLY_JOB: Final = "consolidation-hourly"
HOURLY_S: Final = 3600.0
EVENT_RUN_S: Final = 300.0  # one CompactionDue or MaintenanceDue
HOURLY_RUN_S: Final = 600.0


def register_consolidation(
    scheduler: LocalScheduler,
    backend: Backend,
    model: ModelFactory,
    *,
    interval_s: float = HOURLY_S,
) -> None:
    """Register the consolidation handlers and the hourly job (before scheduler.start())."""
    model = once(model)

    def on_compaction_due(event: DomainEvent) -> None:
        # Raised errors (the model is down) make the scheduler retry the event, then give up on
        # it; the hourly run catches the batch up either way.
        with correlation.correlated(event.correlation_id):  # the turn's that emitted it
            run_compaction_due(
                backend, model, event, run_id=run_id_for(event), deadline=Deadline.after(EVENT_RUN_S)
            )

    def on_maintenance_due(event: DomainEvent) -> None:
        consolidate_workspace(
            backend, model, event.workspace_id, run_id=run_id_for(event), deadline=Deadline.after(EVENT_RUN_S)
        )

    def hourly() -> None:
        # First: it is quick, and the catch-up may use up the run's time.
        sweep_tasks(backend)
        run_hourly(backend, model, run_id=new_id("hourly-"), deadline=Deadline.after(HOURLY_RUN_S))

    def on_turn_committed(event: DomainEvent) -> None:
        # Delivered once the workspace's debounce has passed (SqliteEventBus.publish_after).
        with correlation.correlated(event.correlation_id):
            try:
                extract_turn(backend, model, event, run_id=run_id_for(event))
            except ModelNotConfigured as exc:
                # Retrying cannot help; compaction extracts these messages once a model is set.
                log.warning(
                    "turn extraction skipped: no model",
                    extra={"workspace_id": event.workspace_id, "reason": exc.message},
                )

    scheduler.on("CompactionDue", on_compaction_due)
    scheduler.on("TurnCommitted", on_turn_committed)
    scheduler.on("MaintenanceDue", on_maintenance_due)
    scheduler.every(HOURLY_JOB, interval_s, hourly)
