"""What a maintenance run did: each phase's typed result, and the run's report that sums them.

Free of numpy (unlike the phases), so the runner can type its reports with it without loading
what a CompactionDue never needs.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel

from shared.metric_catalogue import (
    MAINTENANCE_BACKFILLED,
    MAINTENANCE_COMPLETE,
    MAINTENANCE_DURATION,
    MAINTENANCE_MERGED,
    MAINTENANCE_MESSAGES_BACKFILLED,
    MAINTENANCE_PROMOTED,
    MAINTENANCE_PRUNED,
    MAINTENANCE_PURGED,
    MAINTENANCE_SCOPES_BACKFILLED,
    MAINTENANCE_SCORED,
    MAINTENANCE_SUMMARIES_BACKFILLED,
)

# The phases a run goes through, in order; "done" in a checkpoint means the last one finished.
Stage = Literal["scopes", "score", "finish", "messages"]


class PhaseResult(BaseModel):
    """Counts under the report's own field names, which the driver adds to the report."""

    stopped: bool = False  # the deadline came first: the run stops and checkpoints this phase
    after: str | None = None  # where a stopped phase resumes (the score phase's last page)
    written: int = 0
    index_deleted: int = 0
    embed_failures: int = 0

    def stop(self, after: str | None = None) -> Self:
        self.stopped, self.after = True, after
        return self


class MaintenanceReport(BaseModel):
    workspace_id: str
    run_id: str
    complete: bool = False
    # Where an incomplete run stopped; the next run continues there.
    stopped_in: Stage | None = None
    resumed: bool = False
    scored: int = 0
    promoted: int = 0
    pruned: int = 0
    merged_exact: int = 0
    merged_near: int = 0
    capped: int = 0
    backfilled: int = 0
    embed_failures: int = 0
    purged: int = 0
    messages_backfilled: int = 0  # message documents given the vector they were written without
    summaries_backfilled: int = 0  # summary documents likewise
    # Records written before scopes existed given their legacy scope (store and index), this run.
    scopes_backfilled: int = 0
    written: int = 0
    index_deleted: int = 0
    active: int = 0  # active triples at the end of the finish step (0 when it did not run)
    dedup_vectors: int = 0
    dedup_comparisons: int = 0  # candidate pairs whose cosine was computed
    dedup_all_pairs: int = 0  # what comparing every pair of each bucket would have cost
    duration_s: float = 0.0

    @property
    def merged(self) -> int:
        return self.merged_exact + self.merged_near

    def add(self, result: PhaseResult) -> None:
        for name in type(result).model_fields.keys() - PhaseResult.model_fields.keys():
            setattr(self, name, getattr(self, name) + getattr(result, name))
        self.written += result.written
        self.index_deleted += result.index_deleted
        self.embed_failures += result.embed_failures

    def metrics(self) -> dict[str, float]:
        """What the handler publishes (no workspace or user dimension)."""
        return {
            MAINTENANCE_SCORED.name: self.scored,
            MAINTENANCE_PROMOTED.name: self.promoted,
            MAINTENANCE_PRUNED.name: self.pruned + self.capped,
            MAINTENANCE_MERGED.name: self.merged,
            MAINTENANCE_BACKFILLED.name: self.backfilled,
            MAINTENANCE_PURGED.name: self.purged,
            MAINTENANCE_MESSAGES_BACKFILLED.name: self.messages_backfilled,
            MAINTENANCE_SUMMARIES_BACKFILLED.name: self.summaries_backfilled,
            MAINTENANCE_SCOPES_BACKFILLED.name: self.scopes_backfilled,
            MAINTENANCE_DURATION.name: self.duration_s * 1000.0,
            MAINTENANCE_COMPLETE.name: 1.0 if self.complete else 0.0,
        }
