"""Outbox on SQLite: a session's reply parts at the seqs they carry; (turn_id, part) is the ledger."""

from __future__ import annotations

from shared import serde
from shared.adapters.embedded.db import Database, first
from shared.errors import SigilError
from shared.models import OutboundMessage, OutboxEntry

# Positions looked at from the one asked for: a turn's parts take at most 100, and only a turn
# that sent without committing leaves its parts in the way of the next turn's.
MAX_PROBES = 1_000

_MIGRATIONS = [
    # Both keys of the DynamoDB design are unique here too: the position (workspace, session,
    # seq) and the send ledger (workspace, turn, part).
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
        ws, sid = message.workspace_id, message.session_id
        # One write transaction: of two appends racing for one seq, the second sees the first.
        with self._db.transaction() as conn:
            if first(
                conn,
                "SELECT 1 FROM outbox WHERE workspace_id = ? AND turn_id = ? AND part = ?",
                (ws, message.turn_id, message.part),
            ):
                return None
            # The first free seq from the one asked for: taken seqs in a row belong to a turn that
            # sent and never committed (see ports.Outbox), so this part goes after them.
            taken = {
                int(row[0])
                for row in conn.execute(
                    "SELECT seq FROM outbox WHERE workspace_id = ? AND session_id = ? "
                    "AND seq BETWEEN ? AND ?",
                    (ws, sid, message.seq, message.seq + MAX_PROBES),
                )
            }
            seq = next((s for s in range(message.seq, message.seq + MAX_PROBES) if s not in taken), None)
            if seq is None:
                raise SigilError(
                    f"outbox of session {sid}: no free seq after {message.seq}", code="outbox_full"
                )
            entry = OutboxEntry(seq=seq, message=message.model_copy(update={"seq": seq}))
            conn.execute(
                "INSERT INTO outbox (workspace_id, session_id, seq, turn_id, part, doc) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (ws, sid, seq, message.turn_id, message.part, serde.dumps(entry)),
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

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        return self._db.execute(
            "DELETE FROM outbox WHERE workspace_id = ? AND session_id = ?", (workspace_id, session_id)
        )
