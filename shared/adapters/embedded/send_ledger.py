"""SendLedger on SQLite: the send ledger of shared.channels.ledger, in sigil.db."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.channels.ledger import LEDGER_TTL_S, Clock
from shared.clock import epoch_seconds
from shared.ports import SentPiece

if TYPE_CHECKING:
    from shared.adapters.embedded.db import Database

_MIGRATIONS = [
    """
    CREATE TABLE send_ledger (
        workspace_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        part INTEGER NOT NULL,
        chunk INTEGER NOT NULL,
        message_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (workspace_id, turn_id, part, chunk)
    ) WITHOUT ROWID;
    CREATE INDEX send_ledger_expiry ON send_ledger (expires_at);
    """,
]


class SqliteSendLedger:
    def __init__(self, db: Database, *, ttl_s: int = LEDGER_TTL_S, now: Clock = epoch_seconds) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._now = now
        db.migrate("send_ledger", _MIGRATIONS)

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        row = self._db.query_one(
            "SELECT message_id, digest FROM send_ledger WHERE workspace_id = ? AND turn_id = ? "
            "AND part = ? AND chunk = ? AND expires_at > ?",
            (workspace_id, turn_id, part, chunk, self._now()),
        )
        return None if row is None else SentPiece(str(row[0]), str(row[1]))

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        now = self._now()
        with self._db.transaction() as conn:
            # Expired entries go on the way: the local gateway has no TTL sweeper, and the index
            # makes this a range delete of what few rows a week produces.
            conn.execute("DELETE FROM send_ledger WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO send_ledger "
                "(workspace_id, turn_id, part, chunk, message_id, digest, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (workspace_id, turn_id, part, chunk, message_id, text_digest, now + self._ttl_s),
            )
            rows = list(
                conn.execute(
                    "SELECT message_id, digest FROM send_ledger WHERE workspace_id = ? AND turn_id = ? "
                    "AND part = ? AND chunk = ?",
                    (workspace_id, turn_id, part, chunk),
                )
            )
        return SentPiece(str(rows[0][0]), str(rows[0][1]))

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        self._db.execute(
            "UPDATE send_ledger SET digest = ?, expires_at = ? WHERE workspace_id = ? AND turn_id = ? "
            "AND part = ? AND chunk = ?",
            (text_digest, self._now() + self._ttl_s, workspace_id, turn_id, part, chunk),
        )
