"""BudgetStore on SQLite (sigil.db): one row per bucket, charged in one write transaction.

The bucket keys, reset times and decisions are shared.budgets', so this store and the DynamoDB one
decide alike. A charge takes the write lock up front (Database.transaction: BEGIN IMMEDIATE), adds
to every bucket and reads the totals back in that transaction: SQLite runs one writer at a time,
so concurrent charges from the lane workers queue on the busy timeout and none is lost.

A turn's own spending goes in through the session store instead (`add` in SqliteSessionStore.save's
transaction), and its read with the session (`read_totals`): the statements are these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import apsw

from shared.adapters.embedded.db import Database, to_us
from shared.budgets import Bucket, BudgetCharge, BudgetDecision, BudgetUsage, Counters, buckets, evaluate
from shared.models import BudgetLimits

_MIGRATIONS = [
    """
    CREATE TABLE budget_counters (
        workspace_id TEXT NOT NULL,
        bucket TEXT NOT NULL,
        tokens INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        usd_nanos INTEGER NOT NULL DEFAULT 0,
        expires_us INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, bucket)
    ) WITHOUT ROWID;
    CREATE INDEX budget_counters_expiry ON budget_counters (expires_us);
    """,
]


def migrate(db: Database) -> None:
    """Create or upgrade the counters table (the session store writes it in its transaction)."""
    db.migrate("budgets", _MIGRATIONS)


def read_totals(conn: apsw.Connection, workspace_id: str, keys: Sequence[str]) -> dict[str, Counters]:
    """The counters `keys` of the workspace that exist; one statement, so one consistent state."""
    if not keys:
        return {}
    marks = ", ".join("?" for _ in keys)
    rows = conn.execute(
        f"SELECT bucket, tokens, tool_calls, usd_nanos FROM budget_counters "
        f"WHERE workspace_id = ? AND bucket IN ({marks})",
        (workspace_id, *keys),
    )
    return {str(r[0]): Counters(int(r[1]), int(r[2]), int(r[3])) for r in rows}


def add(
    conn: apsw.Connection, workspace_id: str, plan: Sequence[Bucket], amounts: Counters, now: datetime
) -> list[tuple[Bucket, Counters]]:
    """Add `amounts` to every bucket of `plan`, inside the caller's write transaction; returns each
    bucket's totals after it."""
    # Past periods' counters go on the way: the local gateway has no TTL sweeper, and the
    # expiry index makes this a range delete of the few rows a day leaves behind.
    conn.execute("DELETE FROM budget_counters WHERE expires_us <= ?", (to_us(now),))
    readings: list[tuple[Bucket, Counters]] = []
    for bucket in plan:
        rows = list(
            conn.execute(
                "INSERT INTO budget_counters "
                "(workspace_id, bucket, tokens, tool_calls, usd_nanos, expires_us) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, bucket) DO UPDATE SET "
                "tokens = tokens + excluded.tokens, "
                "tool_calls = tool_calls + excluded.tool_calls, "
                "usd_nanos = usd_nanos + excluded.usd_nanos "
                "RETURNING tokens, tool_calls, usd_nanos",
                (
                    workspace_id,
                    bucket.key,
                    amounts.tokens,
                    amounts.tool_calls,
                    amounts.usd_nanos,
                    to_us(bucket.expires_at),
                ),
            )
        )
        tokens, calls, nanos = rows[0]
        readings.append((bucket, Counters(int(tokens), int(calls), int(nanos))))
    return readings


def add_charge(conn: apsw.Connection, charge: BudgetCharge) -> None:
    """A turn's charge, inside the session save's transaction."""
    if not charge.amounts.empty:
        add(conn, charge.workspace_id, charge.buckets, charge.amounts, charge.at)


class SqliteBudgetStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        migrate(db)

    def check(
        self, workspace_id: str, user_id: str | None, limits: BudgetLimits | None, now: datetime
    ) -> BudgetDecision:
        limited = [b for b in buckets(user_id, limits, now) if b.limited]
        if not limited:
            return evaluate(now, [])
        totals = self.totals(workspace_id, [b.key for b in limited])
        return evaluate(now, [(b, totals.get(b.key, Counters())) for b in limited])

    def totals(self, workspace_id: str, counters: Sequence[str]) -> dict[str, Counters]:
        return read_totals(self._db.connection(), workspace_id, counters)

    def charge(
        self,
        workspace_id: str,
        user_id: str | None,
        usage: BudgetUsage,
        limits: BudgetLimits | None,
        now: datetime,
    ) -> BudgetDecision:
        amounts = usage.counters
        if amounts.empty:
            return self.check(workspace_id, user_id, limits, now)
        with self._db.transaction() as conn:
            readings = add(conn, workspace_id, buckets(user_id, limits, now), amounts, now)
        return evaluate(now, readings)
