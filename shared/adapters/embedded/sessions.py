"""SessionStore on SQLite: one row per session, the document written by shared.serde.

A save can carry the Tier-1 records it rolls out, the turn's audit record and its budget charge:
sessions, memory, audit and budget counters share sigil.db, so all of it is written in the save's
one transaction, with the other stores' own statements (memory.insert_messages,
workspaces.insert_audit, budgets.add_charge). `get_with_budget` reads the session and the counters
in one read transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared import serde
from shared.adapters.embedded import budgets, memory, workspaces
from shared.adapters.embedded.db import Database, first, to_us
from shared.budgets import BudgetCharge, Counters
from shared.errors import ConcurrencyConflict
from shared.models import AuditRecord, MemoryRecord, Session

_MIGRATIONS = [
    """
    CREATE TABLE sessions (
        workspace_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_updated ON sessions (workspace_id, updated_us DESC);
    """,
]


class SqliteSessionStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("sessions", _MIGRATIONS)
        # A save writes these tables too; migrating twice is a no-op, so the order in which the
        # stores of one file are opened does not matter.
        memory.migrate(db)
        workspaces.migrate_audit(db)
        budgets.migrate(db)

    def get(self, workspace_id: str, session_id: str) -> Session | None:
        row = self._db.query_one(
            "SELECT doc FROM sessions WHERE workspace_id = ? AND session_id = ?", (workspace_id, session_id)
        )
        return serde.loads(Session, row[0]) if row else None

    def get_with_budget(
        self, workspace_id: str, session_id: str, counters: Sequence[str]
    ) -> tuple[Session | None, dict[str, Counters]]:
        with self._db.snapshot() as conn:
            row = first(
                conn,
                "SELECT doc FROM sessions WHERE workspace_id = ? AND session_id = ?",
                (workspace_id, session_id),
            )
            totals = budgets.read_totals(conn, workspace_id, counters)
        return (serde.loads(Session, row[0]) if row else None), totals

    def save(
        self,
        session: Session,
        *,
        expected_version: int,
        archive: Sequence[MemoryRecord] = (),
        audit: AuditRecord | None = None,
        charge: BudgetCharge | None = None,
    ) -> Session:
        if expected_version < 0:
            raise ValueError("expected_version must be >= 0")
        if audit is not None and audit.workspace_id != session.workspace_id:
            raise ValueError(
                f"audit record {audit.id} belongs to workspace {audit.workspace_id!r}, "
                f"not {session.workspace_id!r}"
            )
        if charge is not None and charge.workspace_id != session.workspace_id:
            raise ValueError(
                f"a budget charge of workspace {charge.workspace_id!r} cannot be saved with a session "
                f"of {session.workspace_id!r}"
            )
        stored = session.model_copy(update={"version": expected_version + 1}, deep=True)
        doc = serde.dumps(stored)
        # The version check and the writes share one write transaction, so of two writers that
        # read the same version exactly one sees it unchanged, and a conflict writes nothing.
        with self._db.transaction() as conn:
            row = first(
                conn,
                "SELECT version FROM sessions WHERE workspace_id = ? AND session_id = ?",
                (session.workspace_id, session.id),
            )
            current = int(row[0]) if row else 0
            if current != expected_version:
                raise ConcurrencyConflict(
                    f"session {session.id} is at version {current}, not {expected_version}"
                )
            conn.execute(
                "INSERT INTO sessions (workspace_id, session_id, version, updated_us, doc) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (workspace_id, session_id) DO UPDATE SET "
                "version = excluded.version, updated_us = excluded.updated_us, doc = excluded.doc",
                (session.workspace_id, session.id, stored.version, to_us(stored.updated_at), doc),
            )
            memory.insert_messages(conn, session.workspace_id, archive)
            if audit is not None:
                workspaces.insert_audit(conn, audit)
            if charge is not None:
                budgets.add_charge(conn, charge)
        return stored

    def list_sessions(self, workspace_id: str, *, limit: int = 100) -> list[Session]:
        """Most recently updated first."""
        rows = self._db.query(
            "SELECT doc FROM sessions WHERE workspace_id = ? ORDER BY updated_us DESC, session_id LIMIT ?",
            (workspace_id, max(0, limit)),
        )
        return [serde.loads(Session, r[0]) for r in rows]

    def delete(self, workspace_id: str, session_id: str) -> None:
        self._db.execute(
            "DELETE FROM sessions WHERE workspace_id = ? AND session_id = ?", (workspace_id, session_id)
        )
