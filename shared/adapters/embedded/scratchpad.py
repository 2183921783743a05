"""Scratchpad on SQLite: one row per (workspace, session, key), in sigil.db.

The bounds (key shape, SCRATCHPAD_MAX_BYTES of text) are the DynamoDB adapter's, checked here
too so an entry that works on one machine works in the cloud.
"""

from __future__ import annotations

from itertools import takewhile

from shared.adapters.embedded.db import Database, to_us
from shared.clock import utcnow
from shared.models.tasks import check_scratchpad_entry

_MIGRATIONS = [
    """
    CREATE TABLE scratchpad (
        workspace_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        key TEXT NOT NULL,
        text TEXT NOT NULL,
        updated_us INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, session_id, key)
    ) WITHOUT ROWID;
    """,
]


class SqliteScratchpad:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("scratchpad", _MIGRATIONS)

    def put(self, workspace_id: str, session_id: str, key: str, text: str) -> None:
        check_scratchpad_entry(key, text)
        self._db.execute(
            "INSERT INTO scratchpad (workspace_id, session_id, key, text, updated_us) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (workspace_id, session_id, key) DO UPDATE SET "
            "text = excluded.text, updated_us = excluded.updated_us",
            (workspace_id, session_id, key, text, to_us(utcnow())),
        )

    def get(self, workspace_id: str, session_id: str, key: str) -> str | None:
        row = self._db.query_one(
            "SELECT text FROM scratchpad WHERE workspace_id = ? AND session_id = ? AND key = ?",
            (workspace_id, session_id, key),
        )
        return str(row[0]) if row else None

    def list_keys(self, workspace_id: str, session_id: str, *, prefix: str = "") -> list[str]:
        # A range on the primary key rather than LIKE, whose % and _ a key may contain.
        rows = self._db.query(
            "SELECT key FROM scratchpad WHERE workspace_id = ? AND session_id = ? AND key >= ? ORDER BY key",
            (workspace_id, session_id, prefix),
        )
        # Ordered by key: the keys with the prefix are the first rows, up to the first without.
        return list(takewhile(lambda k: k.startswith(prefix), (str(r[0]) for r in rows)))

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        return self._db.execute(
            "DELETE FROM scratchpad WHERE workspace_id = ? AND session_id = ?", (workspace_id, session_id)
        )
