"""Maintenance of a workspace's Tier-3 facts (spec 001's consolidation pipeline; docs/consolidation.md).

One run over one scope (a workspace), in this order:

1. **score** every active triple: relevance decays exponentially with the time since it was last
   used or restated, at a rate set by its category (`DEFAULT_LIFETIMES_DAYS`), slowed by
   reinforcement, use and promotion;
2. **promote** what is relevant (> 0.7) and used (access_count > 3) to long-term;
3. **prune** what has faded (relevance < 0.01): status "pruned", out of the index. Derived
   memories only: Tier-1 messages are never touched by consolidation;
4. **backfill embeddings** in batches of 50: a triple without a vector, or with one made by
   another model than `backend.embedder` (a model change), is embedded again and its fact
   document re-indexed;
5. **dedup** in two layers, per user (`merging`);
6. **cap** the active triples at 10,000 per scope, pruning the least relevant first;
7. **purge** merged and pruned triples 30 days after the change (until then a run can be
   rolled back: shared.consolidation.rollback);
8. **re-embed messages** and summaries written without vectors (`vectors`).

The steps are three checkpointed phases, run in order by `driver.run_maintenance`, each
returning a typed result that the run's `MaintenanceReport` sums:

- `scoring` (steps 1-4) goes page by page (500 triples by id) with a checkpoint after each page
  (ConsolidationState, name "maintenance");
- `finish` (steps 5-7) needs the whole scope and is recomputed from the store when a run is cut
  off in it;
- `vectors` (step 8): a run cut off in it resumes there.

Every decision is a function of the stored state and the run's clock, so a retried or resumed
run converges on the state an uninterrupted one reaches.

Writes: a triple is written when its lifecycle changes or its stored relevance is off by 0.05 or
more (relevance is derived and re-derived every run; rewriting 10,000 items an hour for a change
in the third decimal would cost more than it tells). The index is changed before the store, so
a run cut off in between leaves work the next run redoes rather than a pruned fact still found.

This package's own namespace holds only what needs no numpy (the policy, the report, the
checkpoint's name); `run_maintenance` is in `driver`, imported where a run starts.
"""

from shared.consolidation.maintenance.checkpoint import CHECKPOINT
from shared.consolidation.maintenance.policy import (
    DEFAULT_LIFETIMES_DAYS,
    DEFAULT_POLICY,
    MaintenancePolicy,
    lifetime_days,
    relevance,
)
from shared.consolidation.maintenance.report import MaintenanceReport

__all__ = [
    "CHECKPOINT",
    "DEFAULT_LIFETIMES_DAYS",
    "DEFAULT_POLICY",
    "MaintenancePolicy",
    "MaintenanceReport",
    "lifetime_days",
    "relevance",
]
