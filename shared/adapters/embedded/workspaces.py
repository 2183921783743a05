"""WorkspaceStore and AuditLog on SQLite."""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from shared import serde
from shared.adapters.embedded.db import Database, to_us
from shared.models import AuditRecord, WorkspaceConfig

_WORKSPACE_MIGRATIONS = [
    """
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        doc TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
]

_AUDIT_MIGRATIONS = [
    """
    CREATE TABLE audit (
        pos INTEGER PRIMARY KEY AUTOINCREMENT,
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        doc TEXT NOT NULL,
        UNIQUE (workspace_id, id)
    );
    CREATE INDEX audit_by_time ON audit (workspace_id, created_us DESC, pos DESC);
    """,
]


class SqliteWorkspaceStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("workspaces", _WORKSPACE_MIGRATIONS)

    def get(self, workspace_id: str) -> WorkspaceConfig | None:
        row = self._db.query_one("SELECT doc FROM workspaces WHERE id = ?", (workspace_id,))
        return serde.loads(WorkspaceConfig, row[0]) if row else None

    def put(self, config: WorkspaceConfig) -> None:
        self._db.execute(
            "INSERT INTO workspaces (id, doc) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET doc = excluded.doc",
            (config.id, serde.dumps(config)),
        )

    def list_workspaces(self) -> list[WorkspaceConfig]:
        """Ordered by id."""
        rows = self._db.query("SELECT doc FROM workspaces ORDER BY id")
        return [serde.loads(WorkspaceConfig, r[0]) for r in rows]


def migrate_audit(db: Database) -> None:
    """Create or upgrade the audit table (the session store writes it in its transaction)."""
    db.migrate("audit", _AUDIT_MIGRATIONS)


def insert_audit(conn: apsw.Connection, record: AuditRecord) -> None:
    """One audit row, inside the caller's transaction (AuditLog.append, and a session's save)."""
    # Idempotent by record id: a retried turn's audit write does not count the turn twice.
    conn.execute(
        "INSERT INTO audit (workspace_id, id, created_us, doc) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (workspace_id, id) DO NOTHING",
        (record.workspace_id, record.id, to_us(record.created_at), serde.dumps(record)),
    )


class SqliteAuditLog:
    def __init__(self, db: Database) -> None:
        self._db = db
        migrate_audit(db)

    def append(self, record: AuditRecord) -> None:
        with self._db.transaction() as conn:
            insert_audit(conn, record)

    def list_records(self, workspace_id: str, *, limit: int = 100) -> list[AuditRecord]:
        rows = self._db.query(
            "SELECT doc FROM audit WHERE workspace_id = ? ORDER BY created_us DESC, pos DESC LIMIT ?",
            (workspace_id, max(0, limit)),
        )
        return [serde.loads(AuditRecord, r[0]) for r in rows]

    def anonymise(self, workspace_id: str, *, user_id: str, session_ids: Sequence[str] = ()) -> int:
        sessions = set(session_ids)
        changed = 0
        # An admin operation over the workspace's records: read them all in one transaction.
        with self._db.transaction() as conn:
            rows = list(conn.execute("SELECT pos, doc FROM audit WHERE workspace_id = ?", (workspace_id,)))
            for pos, doc in rows:
                record: AuditRecord = serde.loads(AuditRecord, doc)
                if record.user_id == user_id or record.session_id in sessions:
                    conn.execute(
                        "UPDATE audit SET doc = ? WHERE pos = ?", (serde.dumps(record.anonymised()), pos)
                    )
                    changed += 1
        return changed
