"""MediaUsage on SQLite: a workspace's fetched media bytes per UTC day, in sigil.db."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.adapters.embedded.db import Database

_MIGRATIONS = [
    """
    CREATE TABLE media_usage (
        workspace_id TEXT NOT NULL,
        day TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, day)
    ) WITHOUT ROWID;
    """,
]


class SqliteMediaUsage:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("media_usage", _MIGRATIONS)

    def add(self, workspace_id: str, day: str, size: int) -> int:
        with self._db.transaction() as conn:
            rows = list(
                conn.execute(
                    "INSERT INTO media_usage (workspace_id, day, bytes) VALUES (?, ?, ?) "
                    "ON CONFLICT (workspace_id, day) DO UPDATE SET bytes = bytes + excluded.bytes "
                    "RETURNING bytes",
                    (workspace_id, day, size),
                )
            )
            # Days before the last week are read by nothing: dropped on the way.
            conn.execute(
                "DELETE FROM media_usage WHERE workspace_id = ? AND day < date(?, '-7 days')",
                (workspace_id, day),
            )
        return int(rows[0][0])

    def total(self, workspace_id: str, day: str) -> int:
        row = self._db.query_one(
            "SELECT bytes FROM media_usage WHERE workspace_id = ? AND day = ?", (workspace_id, day)
        )
        return 0 if row is None else int(row[0])
