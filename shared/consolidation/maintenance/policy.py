"""How fast a fact fades, when it is promoted or pruned, and the lifecycle history it carries.

Every decision of a run is a function of the stored triple, the run's clock and this policy, so a
retried or resumed run converges on what an uninterrupted one reaches.

Spec 001's per-scope decay: the workspace's memory config (WorkspaceConfig.memory.decay) sets a
factor on the lifetime of facts of each scope (shared.memory.scope.scope_level: a person's own,
a group's, the workspace's shared ones); a scope it does not name keeps factor 1.0, so a
workspace that sets nothing decays exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Literal

from shared.memory.scope import scope_level
from shared.models import FactCategory, ScopeLevel, Triple, TripleChange, WorkspaceConfig

# Days for an untouched fact of each category to fade from relevance 1 to the prune threshold
# (0.01): relevance = 0.01 ** (age / lifetime). Style observations follow spec 003 (a one-off
# observation expires after 14 days, one seen n times after n x 14); daily decisions go within a
# month; artifacts in a season; facts stored by hand in half a year; preferences and entities,
# what a user is and cares about, last one and two years.
DEFAULT_LIFETIMES_DAYS: Mapping[FactCategory, float] = MappingProxyType(
    {
        "style": 14.0,
        "decision": 30.0,
        "artifact": 90.0,
        "fact": 180.0,
        "preference": 365.0,
        "entity": 730.0,
    }
)


@dataclass(frozen=True)
class MaintenancePolicy:
    lifetimes_days: Mapping[FactCategory, float] = field(default_factory=lambda: DEFAULT_LIFETIMES_DAYS)
    long_term_factor: float = 10.0  # long-term facts fade ten times slower
    promote_relevance: float = 0.7
    promote_accesses: int = 3  # promoted when access_count > this
    prune_below: float = 0.01
    dedup_cosine: float = 0.95
    cap: int = 10_000
    embed_batch: int = 50
    page_size: int = 500
    write_delta: float = 0.05
    retention: timedelta = timedelta(days=30)
    max_history: int = 8
    # Seconds a unit of work (a page, a batch of embeddings, a chunk of writes) may take: a run
    # does not start one with less than this left before its deadline.
    unit_reserve_s: float = 2.0
    # The workspace's factor on the lifetime per scope level (for_workspace); none: 1.0.
    scope_decay: Mapping[ScopeLevel, float] = field(default_factory=lambda: MappingProxyType({}))
    # Records written before scopes existed that one run gives a scope (the backfill phase).
    backfill_page: int = 500

    def for_workspace(self, workspace: WorkspaceConfig | None) -> MaintenancePolicy:
        """This policy with the workspace's per-scope decay."""
        if workspace is None or not workspace.memory.decay:
            return self
        return replace(self, scope_decay=MappingProxyType(dict(workspace.memory.decay)))


DEFAULT_POLICY = MaintenancePolicy()


def aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def lifetime_days(triple: Triple, policy: MaintenancePolicy = DEFAULT_POLICY) -> float:
    """Days until an untouched `triple` fades to the prune threshold."""
    base = policy.lifetimes_days.get(triple.category, policy.lifetimes_days.get("fact", 180.0))
    use = 1.0 + math.log1p(triple.access_count)
    promoted = policy.long_term_factor if triple.long_term else 1.0
    lifetime = base * triple.reinforced_count * use * promoted
    if policy.scope_decay:  # no factor at all: exactly the lifetime of before
        lifetime *= policy.scope_decay.get(scope_level(triple.scope), 1.0)
    return lifetime


def relevance(triple: Triple, now: datetime, policy: MaintenancePolicy = DEFAULT_POLICY) -> float:
    """1.0 when just stated or used, falling exponentially to `prune_below` after its lifetime."""
    last = aware(triple.updated_at)
    if triple.last_accessed_at is not None:
        last = max(last, aware(triple.last_accessed_at))
    age_days = max(0.0, (aware(now) - last).total_seconds() / 86_400.0)
    value = float(policy.prune_below ** (age_days / lifetime_days(triple, policy)))
    return min(1.0, max(0.0, value))


def changed(
    triple: Triple,
    run_id: str,
    action: Literal["promoted", "pruned", "merged", "absorbed"],
    now: datetime,
    policy: MaintenancePolicy,
) -> Triple:
    """The triple with this run's change recorded: the values before the run, once per run."""
    if triple.changes and triple.changes[-1].run_id == run_id:
        return triple.model_copy()  # already recorded: the entry holds the values before the run
    entry = TripleChange(
        run_id=run_id,
        at=now,
        action=action,
        status=triple.status,
        merged_into=triple.merged_into,
        long_term=triple.long_term,
        access_count=triple.access_count,
        reinforced_count=triple.reinforced_count,
        last_accessed_at=triple.last_accessed_at,
        updated_at=triple.updated_at,
        message_ids=list(triple.message_ids),
    )
    return triple.model_copy(update={"changes": [*triple.changes, entry][-policy.max_history :]})
