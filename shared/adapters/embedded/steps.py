"""StepLog on SQLite: one row per saved step (a model call's or a tool call's message), in sigil.db.

Keyed by (workspace, key, seq), the key being a turn's id or a task's id; a second append of the
same seq changes nothing (a redelivered invocation repeating a step it already saved). Rows
expire STEP_TTL_S after they are written: there is no TTL sweeper on one machine, so an append
deletes what has expired, and reads never return it.
"""

from __future__ import annotations

from collections.abc import Callable

from shared import serde
from shared.adapters.embedded.db import Database
from shared.clock import epoch_seconds
from shared.models import Message
from shared.models.tasks import STEP_TTL_S

_MIGRATIONS = [
    """
    CREATE TABLE steps (
        workspace_id TEXT NOT NULL,
        key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        doc TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (workspace_id, key, seq)
    ) WITHOUT ROWID;
    CREATE INDEX steps_expiry ON steps (expires_at);
    """,
]


class SqliteStepLog:
    def __init__(
        self, db: Database, *, ttl_s: int = STEP_TTL_S, now: Callable[[], float] = epoch_seconds
    ) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._now = now
        db.migrate("steps", _MIGRATIONS)

    def append(self, workspace_id: str, key: str, seq: int, message: Message) -> bool:
        if seq < 0:
            raise ValueError(f"step seq must be >= 0, not {seq}")
        now = self._now()
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM steps WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO steps (workspace_id, key, seq, doc, expires_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (workspace_id, key, seq, serde.dumps(message, Message), now + self._ttl_s),
            )
            return int(conn.changes()) > 0

    def load(self, workspace_id: str, key: str) -> list[Message]:
        rows = self._db.query(
            "SELECT doc FROM steps WHERE workspace_id = ? AND key = ? AND expires_at > ? ORDER BY seq",
            (workspace_id, key, self._now()),
        )
        return [serde.loads(Message, r[0]) for r in rows]

    def clear(self, workspace_id: str, key: str) -> int:
        return self._db.execute("DELETE FROM steps WHERE workspace_id = ? AND key = ?", (workspace_id, key))
