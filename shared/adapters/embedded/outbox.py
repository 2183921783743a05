"""Outbox on SQLite: a session's reply parts in order, keyed by (turn_id, part) as the send ledger."""

from __future__ import annotations

from shared import serde
from shared.adapters.embedded.db import Database, first
from shared.models import OutboundMessage, OutboxEntry

_MIGRATIONS = [
    """
    CREATE TABLE outbox (
        workspace_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        part INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, session_id, seq)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX outbox_ledger ON outbox (workspace_id, turn_id, part);
    """,
]


class SqliteOutbox:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("outbox", _MIGRATIONS)

    def append(self, message: OutboundMessage) -> OutboxEntry | None:
        with self._db.transaction() as conn:
            if first(
                conn,
                "SELECT 1 FROM outbox WHERE workspace_id = ? AND turn_id = ? AND part = ?",
                (message.workspace_id, message.turn_id, message.part),
            ):
                return None
            # Numbering inside the write transaction: two appends to one session cannot both
            # read the same maximum. Sequences start at 1 so read(after_seq=0) returns all.
            row = first(
                conn,
                "SELECT COALESCE(MAX(seq), 0) FROM outbox WHERE workspace_id = ? AND session_id = ?",
                (message.workspace_id, message.session_id),
            )
            entry = OutboxEntry(seq=(int(row[0]) if row else 0) + 1, message=message)
            conn.execute(
                "INSERT INTO outbox (workspace_id, session_id, seq, turn_id, part, doc) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    message.workspace_id,
                    message.session_id,
                    entry.seq,
                    message.turn_id,
                    message.part,
                    serde.dumps(entry),
                ),
            )
        return entry

    def read(
        self, workspace_id: str, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[OutboxEntry]:
        rows = self._db.query(
            "SELECT doc FROM outbox WHERE workspace_id = ? AND session_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (workspace_id, session_id, after_seq, max(0, limit)),
        )
        return [serde.loads(OutboxEntry, r[0]) for r in rows]
