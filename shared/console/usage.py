"""Usage and cost from the audit log (AuditLog port): per day, per user, and what budgets remain."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from shared.backend import Backend
from shared.budgets import buckets
from shared.models import AuditRecord, BudgetLimits
from shared.models.budgets import format_amount, format_duration

# The console reads a workspace's audit log whole up to this many records (newest first): an
# operator's look back, not an export.
MAX_RECORDS = 20_000


@dataclass
class Totals:
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: float = 0.0
    last: datetime | None = None
    models: set[str] = field(default_factory=set)

    def add(self, r: AuditRecord) -> None:
        self.turns += 1
        self.tokens += r.tokens_in + r.tokens_out
        self.cost_usd += r.cost_usd
        self.duration_ms += r.duration_ms
        if r.model:
            self.models.add(r.model)
        if self.last is None or r.created_at > self.last:
            self.last = r.created_at

    @property
    def mean_latency_ms(self) -> float:
        return self.duration_ms / self.turns if self.turns else 0.0


def records(backend: Backend, workspace_id: str) -> list[AuditRecord]:
    return backend.audit.list_records(workspace_id, limit=MAX_RECORDS)


def total(found: Iterable[AuditRecord]) -> Totals:
    t = Totals()
    for r in found:
        t.add(r)
    return t


def by_day(found: Sequence[AuditRecord]) -> list[tuple[date, Totals]]:
    """One entry per UTC day from the first record's to the last's, days without turns included
    (a gap in use is worth seeing)."""
    if not found:
        return []
    days: dict[date, Totals] = {}
    for r in found:
        days.setdefault(r.created_at.date(), Totals()).add(r)
    first, last = min(days), max(days)
    out = []
    day = first
    while day <= last:
        out.append((day, days.get(day, Totals())))
        day += timedelta(days=1)
    return out


def by_user(found: Iterable[AuditRecord]) -> dict[str, Totals]:
    """Per user id; records without one (anonymised by an erasure, or a sender the channel does
    not identify) are left out."""
    users: dict[str, Totals] = {}
    for r in found:
        if r.user_id:
            users.setdefault(r.user_id, Totals()).add(r)
    return dict(sorted(users.items()))


def by_session(found: Iterable[AuditRecord]) -> dict[str, Totals]:
    sessions: dict[str, Totals] = {}
    for r in found:
        sessions.setdefault(r.session_id, Totals()).add(r)
    return sessions


@dataclass(frozen=True)
class Remaining:
    scope: str
    period: str
    metric: str
    used: str
    limit: str
    left: str
    resets: str


def remaining(
    backend: Backend, workspace_id: str, user_id: str | None, limits: BudgetLimits, now: datetime
) -> list[Remaining]:
    """Each limited counter of the buckets a call by `user_id` would touch now (the workspace's
    alone with None): used, limit and what is left, read through the BudgetStore."""
    found = [b for b in buckets(user_id, limits, now) if user_id is None or b.scope == "user"]
    if user_id is None:
        found = [b for b in found if b.scope == "workspace"]
    totals = backend.budgets.totals(workspace_id, [b.key for b in found])
    out = []
    for b in found:
        counters = totals.get(b.key)
        for metric, limit in b.limits.items():
            used = counters.get(metric) if counters is not None else 0
            out.append(
                Remaining(
                    scope=b.scope,
                    period=b.period,
                    metric=metric,
                    used=format_amount(metric, used, limit),
                    limit=format_amount(metric, limit),
                    left=format_amount(metric, max(0, limit - used), limit),
                    resets=f"in {format_duration(b.resets_at - now)}",
                )
            )
    return out
