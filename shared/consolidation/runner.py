"""The consolidation runs, as every trigger starts them: the Lambda handler (CompactionDue and the
hourly schedule), the local gateway's scheduler and `sigil consolidate` all call these.

- `run_compaction_due`: one session's CompactionDue, i.e. `compact_session` for it.
- `consolidate_workspace`: one workspace's catch-up and maintenance: every session with a
  complete batch not yet summarised is compacted (a CompactionDue lost or given up on is caught
  up here), then the workspace's facts are maintained (shared.consolidation.maintenance), under
  the workspace's "maintenance" lease.
- `run_hourly`: `consolidate_workspace` for every workspace, in id order, under one "hourly"
  lease; a run out of time leaves a "catchup" checkpoint naming the workspace it was in, and the
  next run starts there.

A failure in one session or workspace is logged and counted, and the run goes on to the next:
one poisoned conversation must not stop consolidation for everyone. A model that is not
configured skips compaction (retrying cannot help; the next run tries again) but not
maintenance, which calls no model. A workspace whose budget is used up stops its catch-up at the
first compaction that says so ("over_budget": its other sessions share that budget), and
maintenance still runs; the next hourly run after the budget resets summarises what was left.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, Field

from shared.backend import Backend
from shared.clock import new_id, utcnow
from shared.consolidation.compaction import (
    CompactionResult,
    ConsolidationModel,
    compact_session,
    summarised_until,
)
from shared.consolidation.deadline import Deadline
from shared.consolidation.maintenance import MaintenanceReport
from shared.errors import ModelNotConfigured
from shared.lazy import once
from shared.metric_catalogue import (
    COMPACTION_BUSY,
    COMPACTION_DURATION,
    COMPACTION_OVER_BUDGET,
    CONSOLIDATION_ERRORS,
    CONSOLIDATION_PARTIAL,
    CONSOLIDATION_RUN_DURATION,
    CONSOLIDATION_TOKENS_IN,
    CONSOLIDATION_TOKENS_OUT,
    FACTS_DROPPED,
    FACTS_EXTRACTED,
    FACTS_MERGED,
    SUMMARIES_WRITTEN,
)
from shared.models import DomainEvent, WorkspaceConfig, new_workspace

log = logging.getLogger("sigil.consolidation")

ModelFactory = Callable[[], ConsolidationModel]

# Scope of the hourly run's own lease and checkpoint. Not a workspace: ids must start with a
# letter or digit (shared.models.ID_PATTERN), so no workspace can be called this.
GLOBAL_SCOPE: Final = "_consolidation"
HOURLY_LEASE: Final = "hourly"
CATCHUP_CHECKPOINT: Final = "catchup"
MAINTENANCE_LEASE: Final = "maintenance"
# Sessions looked at per workspace by the catch-up (the most recently updated first).
CATCHUP_SESSIONS: Final = 1000
# Time not to start a workspace (or a session) without.
UNIT_RESERVE_S: Final = 30.0
LEASE_MARGIN_S: Final = 60.0
LEASE_DEFAULT_S: Final = 3600.0


class Totals(BaseModel):
    """Counts summed over a run's compactions (the metrics the handler publishes)."""

    sessions: int = 0  # compactions run (busy ones included)
    busy: int = 0
    over_budget: int = 0  # compactions stopped (or not started) by a used-up workspace budget
    summaries: int = 0
    facts_extracted: int = 0
    facts_merged: int = 0
    facts_dropped: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: int = 0

    def add(self, result: CompactionResult) -> None:
        self.sessions += 1
        self.busy += result.status == "busy"
        self.over_budget += result.status == "over_budget"
        self.summaries += result.summaries
        self.facts_extracted += result.facts_extracted
        self.facts_merged += result.facts_merged
        self.facts_dropped += result.facts_dropped
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out

    def merge(self, other: Totals) -> None:
        for name in Totals.model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def of(cls, result: CompactionResult) -> Totals:
        totals = cls()
        totals.add(result)
        return totals

    def metrics(self) -> dict[str, float]:
        return {
            SUMMARIES_WRITTEN.name: self.summaries,
            FACTS_EXTRACTED.name: self.facts_extracted,
            FACTS_MERGED.name: self.facts_merged,
            FACTS_DROPPED.name: self.facts_dropped,
            COMPACTION_BUSY.name: self.busy,
            COMPACTION_OVER_BUDGET.name: self.over_budget,
            CONSOLIDATION_ERRORS.name: self.errors,
            CONSOLIDATION_TOKENS_IN.name: self.tokens_in,
            CONSOLIDATION_TOKENS_OUT.name: self.tokens_out,
        }


def compaction_metrics(result: CompactionResult) -> dict[str, float]:
    """One session's compaction (a CompactionDue): its counts and how long it took."""
    return Totals.of(result).metrics() | {COMPACTION_DURATION.name: result.duration_ms}


class WorkspaceReport(BaseModel):
    workspace_id: str
    status: Literal["done", "partial"] = "done"
    compactions: list[CompactionResult] = Field(default_factory=list)
    totals: Totals = Field(default_factory=Totals)
    # None when maintenance did not run (busy, not installed, or no time left).
    maintenance: MaintenanceReport | None = None
    maintenance_busy: bool = False
    # Why the catch-up stopped without a model (ModelNotConfigured's message), if it did.
    no_model: str | None = None

    def metrics(self) -> dict[str, float]:
        return self.totals.metrics() | (self.maintenance.metrics() if self.maintenance else {})


class HourlyReport(BaseModel):
    run_id: str
    status: Literal["done", "partial", "busy"]
    resumed_at: str | None = None  # the workspace a previous run's checkpoint named
    workspaces: list[WorkspaceReport] = Field(default_factory=list)
    totals: Totals = Field(default_factory=Totals)
    duration_ms: float = 0.0

    def metrics(self) -> dict[str, float]:
        """The pass's counts, with every workspace's maintenance summed: per-workspace dimensions
        would be unbounded."""
        values = self.totals.metrics() | {
            CONSOLIDATION_RUN_DURATION.name: self.duration_ms,
            CONSOLIDATION_PARTIAL.name: 1.0 if self.status == "partial" else 0.0,
        }
        for w in self.workspaces:
            for name, value in (w.maintenance.metrics() if w.maintenance else {}).items():
                values[name] = values.get(name, 0.0) + value
        return values


def run_id_for(event: DomainEvent) -> str:
    """A run id derived from the event, the same on every delivery of it: a retried run's records
    carry the id an uninterrupted one would have."""
    key = "\n".join(
        (
            event.type,
            event.workspace_id,
            event.session_id or "",
            repr(sorted(event.detail.items())),
            event.at.isoformat(),
        )
    )
    return "r_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _ttl(deadline: Deadline, default: float) -> float:
    remaining = deadline.remaining()
    return default if math.isinf(remaining) else max(remaining, 0.0) + LEASE_MARGIN_S


# ---------------------------------------------------------------- one session


def run_compaction_due(
    backend: Backend,
    model: ModelFactory,
    event: DomainEvent,
    *,
    run_id: str,
    deadline: Deadline | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> CompactionResult | None:
    """Compact the event's session; None when the event names none or no model is configured.

    Any other error is raised, for the trigger to retry (EventBridge, the local scheduler).
    """
    if event.session_id is None:
        log.warning("CompactionDue without a session", extra={"workspace_id": event.workspace_id})
        return None
    try:
        # The factory is called only once a batch is found: an event for a batch already done
        # needs no model.
        return compact_session(
            backend,
            model,
            event.workspace_id,
            event.session_id,
            run_id=run_id,
            clock=clock,
            deadline=deadline,
        )
    except ModelNotConfigured as exc:
        # Retrying cannot help; the hourly catch-up summarises the batch once a model is set.
        log.warning(
            "compaction skipped: no model", extra={"workspace_id": event.workspace_id, "reason": exc.message}
        )
        return None


# ---------------------------------------------------------------- one workspace


def pending_sessions(backend: Backend, workspace: WorkspaceConfig) -> list[str]:
    """The workspace's sessions with a complete batch of Tier-1 messages not yet summarised."""
    due: list[str] = []
    for session in backend.sessions.list_sessions(workspace.id, limit=CATCHUP_SESSIONS):
        if session.rolled_out_count < workspace.summary_batch:
            continue  # no complete batch yet: no need to read a checkpoint
        done = summarised_until(backend, workspace.id, session.id)
        if session.rolled_out_count - (done + 1) >= workspace.summary_batch:
            due.append(session.id)
    return sorted(due)


def consolidate_workspace(
    backend: Backend,
    model: ModelFactory,
    workspace_id: str,
    *,
    run_id: str,
    deadline: Deadline | None = None,
    clock: Callable[[], datetime] = utcnow,
    maintenance: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> WorkspaceReport:
    """Catch up the workspace's compactions, then maintain its facts (module docstring).
    `progress` hears a line as each step starts (`sigil consolidate` prints them)."""
    deadline = deadline or Deadline.never()
    report = WorkspaceReport(workspace_id=workspace_id)
    workspace = backend.workspaces.get(workspace_id) or new_workspace(workspace_id)
    model = once(model)  # one provider client for all the workspace's sessions
    for session_id in pending_sessions(backend, workspace):
        if deadline.expired(UNIT_RESERVE_S):
            report.status = "partial"
            return report
        progress(f"{workspace_id}: compacting session {session_id}")
        try:
            result = compact_session(
                backend, model, workspace_id, session_id, run_id=run_id, clock=clock, deadline=deadline
            )
        except ModelNotConfigured as exc:
            log.warning(
                "catch-up skipped: no model", extra={"workspace_id": workspace_id, "reason": exc.message}
            )
            report.no_model = exc.message
            break
        except Exception:  # one session's failure must not stop the others (module docstring)
            log.exception(
                "catch-up compaction failed", extra={"workspace_id": workspace_id, "session_id": session_id}
            )
            report.totals.errors += 1
            continue
        report.compactions.append(result)
        report.totals.add(result)
        if result.status == "partial":
            report.status = "partial"
            return report
        if result.status == "over_budget":
            break  # the workspace's other sessions would find the same budget used up
    if maintenance:
        progress(f"{workspace_id}: maintaining facts")
        _maintain(backend, workspace_id, run_id=run_id, deadline=deadline, clock=clock, report=report)
    return report


def _maintain(
    backend: Backend,
    workspace_id: str,
    *,
    run_id: str,
    deadline: Deadline,
    clock: Callable[[], datetime],
    report: WorkspaceReport,
) -> None:
    try:
        # Imported when needed: maintenance pulls in numpy, which a CompactionDue never needs.
        from shared.consolidation.maintenance.driver import run_maintenance
    except ImportError:  # pragma: no cover -- only while maintenance is not installed
        log.warning("maintenance is not available; skipped")
        return
    if deadline.expired(UNIT_RESERVE_S):
        report.status = "partial"
        return
    owner = f"{run_id}/{new_id()}"
    if not backend.consolidation.acquire_lease(
        workspace_id, MAINTENANCE_LEASE, owner, _ttl(deadline, LEASE_DEFAULT_S)
    ):
        report.maintenance_busy = True
        return
    try:
        result = run_maintenance(backend, workspace_id, run_id=run_id, deadline=deadline, clock=clock)
    except Exception:  # the next run resumes from maintenance's own checkpoint
        log.exception("maintenance failed", extra={"workspace_id": workspace_id})
        report.totals.errors += 1
        return
    finally:
        backend.consolidation.release_lease(workspace_id, MAINTENANCE_LEASE, owner)
    report.maintenance = result
    if not result.complete:
        report.status = "partial"


# ---------------------------------------------------------------- every workspace


def run_hourly(
    backend: Backend,
    model: ModelFactory,
    *,
    run_id: str,
    deadline: Deadline | None = None,
    clock: Callable[[], datetime] = utcnow,
    progress: Callable[[str], None] = lambda _: None,
) -> HourlyReport:
    """Catch-up and maintenance of every workspace, resuming where a previous run stopped."""
    started = time.monotonic()
    deadline = deadline or Deadline.never()
    state = backend.consolidation
    owner = f"{run_id}/{new_id()}"
    report = HourlyReport(run_id=run_id, status="busy")
    if not state.acquire_lease(GLOBAL_SCOPE, HOURLY_LEASE, owner, _ttl(deadline, LEASE_DEFAULT_S)):
        log.info("hourly consolidation busy")
        return report
    try:
        report.status = "done"
        model = once(model)
        resume = state.get_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT) or None
        report.resumed_at = resume
        ids = sorted(w.id for w in backend.workspaces.list_workspaces())
        if resume is not None:
            # From where the last run stopped to the end; the ones before it wait for the next pass.
            ids = [i for i in ids if i >= resume]
        for workspace_id in ids:
            if deadline.expired(UNIT_RESERVE_S):
                report.status = "partial"
                state.put_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT, workspace_id)
                break
            state.put_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT, workspace_id)
            try:
                done = consolidate_workspace(
                    backend,
                    model,
                    workspace_id,
                    run_id=run_id,
                    deadline=deadline,
                    clock=clock,
                    progress=progress,
                )
            except Exception:  # e.g. the workspace's store calls failing: the others still run
                log.exception("workspace consolidation failed", extra={"workspace_id": workspace_id})
                report.totals.errors += 1
                continue
            report.workspaces.append(done)
            report.totals.merge(done.totals)
            if done.status == "partial":
                report.status = "partial"
                break  # the checkpoint names this workspace: the next run continues in it
        else:
            state.put_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT, "")
    finally:
        state.release_lease(GLOBAL_SCOPE, HOURLY_LEASE, owner)
        report.duration_ms = round((time.monotonic() - started) * 1000, 3)
    log.info(
        "hourly consolidation",
        extra={
            "run_id": run_id,
            "status": report.status,
            **report.totals.model_dump(),
            "ms": report.duration_ms,
        },
    )
    return report


def summary_lines(report: HourlyReport | WorkspaceReport | CompactionResult | None) -> list[str]:
    """What a run did, for `sigil consolidate` (counts only, never memory text)."""
    if report is None:
        return ["nothing to do (no session named, or no model configured)"]
    if isinstance(report, CompactionResult):
        return [_compaction_line(report)]
    lines: list[str] = []
    workspaces = report.workspaces if isinstance(report, HourlyReport) else [report]
    if isinstance(report, HourlyReport):
        lines.append(f"run {report.run_id}: {report.status} in {report.duration_ms:.0f} ms")
    for ws in workspaces:
        lines.append(f"workspace {ws.workspace_id}: {ws.status}")
        lines.extend("  " + _compaction_line(c) for c in ws.compactions)
        if ws.no_model:
            lines.append(f"  compaction skipped: {ws.no_model}")
        if ws.maintenance_busy:
            lines.append("  maintenance: busy (another run holds the workspace)")
        elif ws.maintenance is not None:
            m = ws.maintenance
            lines.append(
                f"  maintenance: scored {m.scored}, promoted {m.promoted}, pruned {m.pruned}, "
                f"merged {m.merged}, backfilled {m.backfilled}, "
                f"messages re-embedded {m.messages_backfilled}, "
                f"summaries re-embedded {m.summaries_backfilled}"
            )
        if ws.totals.errors:
            lines.append(f"  errors: {ws.totals.errors} (see the log)")
    return lines


def _compaction_line(c: CompactionResult) -> str:
    budget = f" (budget used up: {c.budget_exhausted})" if c.budget_exhausted else ""
    return (
        f"session {c.session_id}: {c.status}{budget}, {c.summaries} summaries "
        f"(summarised to seq {c.checkpoint}), "
        f"facts {c.facts_extracted} new / {c.facts_merged} merged / {c.facts_dropped} dropped"
    )
