"""ConsolidationState on SQLite (sigil.db): leases and checkpoints of the consolidation runs.

A lease is taken in one write transaction (Database.transaction: BEGIN IMMEDIATE), so the read of
the current holder and the write of the new one cannot interleave with another taker's: SQLite
runs one writer at a time, and the second taker, queued on the busy timeout, then reads the first
one's lease and is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shared.adapters.embedded.db import Database, first

_MIGRATIONS = [
    """
    CREATE TABLE consolidation_leases (
        workspace_id TEXT NOT NULL,
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (workspace_id, name)
    ) WITHOUT ROWID;

    CREATE TABLE consolidation_checkpoints (
        workspace_id TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (workspace_id, name)
    ) WITHOUT ROWID;
    """,
]


class SqliteConsolidationState:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self.clock = clock  # epoch seconds: lease expiry is compared across processes
        db.migrate("consolidation", _MIGRATIONS)

    def acquire_lease(self, workspace_id: str, name: str, owner: str, ttl_s: float) -> bool:
        now = self.clock()
        with self._db.transaction() as conn:
            held = first(
                conn,
                "SELECT owner, expires_at FROM consolidation_leases WHERE workspace_id = ? AND name = ?",
                (workspace_id, name),
            )
            if held is not None and held[0] != owner and float(held[1]) > now:
                return False
            conn.execute(
                "INSERT INTO consolidation_leases (workspace_id, name, owner, expires_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (workspace_id, name) DO UPDATE SET "
                "owner = excluded.owner, expires_at = excluded.expires_at",
                (workspace_id, name, owner, now + ttl_s),
            )
        return True

    def release_lease(self, workspace_id: str, name: str, owner: str) -> None:
        self._db.execute(
            "DELETE FROM consolidation_leases WHERE workspace_id = ? AND name = ? AND owner = ?",
            (workspace_id, name, owner),
        )

    def get_checkpoint(self, workspace_id: str, name: str) -> str | None:
        row = self._db.query_one(
            "SELECT value FROM consolidation_checkpoints WHERE workspace_id = ? AND name = ?",
            (workspace_id, name),
        )
        return None if row is None else str(row[0])

    def put_checkpoint(self, workspace_id: str, name: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO consolidation_checkpoints (workspace_id, name, value) VALUES (?, ?, ?) "
            "ON CONFLICT (workspace_id, name) DO UPDATE SET value = excluded.value",
            (workspace_id, name, value),
        )
