"""MemoryStore on SQLite: Tier-1 messages, Tier-2 summaries and Tier-3 triples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import apsw

from shared import serde
from shared.adapters.embedded.db import (
    SCOPE_COLUMNS_DDL,
    SCOPE_COLUMNS_FROM_DOC,
    Database,
    scope_columns,
    scope_filter,
    to_us,
)
from shared.memory.keys import normalize_key
from shared.models import MemoryRecord, MemoryScope, MemoryTier, RecallScope, Summary, Triple

_MIGRATIONS = [
    """
    CREATE TABLE memory_messages (
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_messages_by_seq ON memory_messages (workspace_id, session_id, seq);

    CREATE TABLE memory_summaries (
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        start_us INTEGER NOT NULL,
        end_us INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_summaries_by_start ON memory_summaries (workspace_id, start_us);
    CREATE INDEX memory_summaries_by_session ON memory_summaries (workspace_id, session_id, start_us);

    CREATE TABLE memory_triples (
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        subject_key TEXT NOT NULL,
        object_key TEXT NOT NULL,
        updated_us INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_triples_by_subject ON memory_triples (workspace_id, subject_key);
    CREATE INDEX memory_triples_by_object ON memory_triples (workspace_id, object_key);
    """,
    # Lifecycle (spec 001): only active triples are recalled by subject or object, so the status
    # is a column those lookups filter on; rows written before it read theirs from the document.
    """
    ALTER TABLE memory_triples ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
    UPDATE memory_triples SET status = COALESCE(json_extract(doc, '$.status'), 'active');
    """,
    # Scopes (shared.memory.scope): columns that scope_filter reads in each cross-session query.
    # Rows written before have no scope (scoped 0, NULL columns): visible only in their own
    # session or workspace-wide until maintenance's backfill stamps them (the partial indexes
    # find them). A triple's session becomes a column too: its own-session clause reads it.
    "ALTER TABLE memory_messages ADD COLUMN scoped INTEGER NOT NULL DEFAULT 0;\n"
    "UPDATE memory_messages SET scoped = json_extract(doc, '$.scope') IS NOT NULL;\n"
    "CREATE INDEX memory_messages_unscoped ON memory_messages (workspace_id) WHERE scoped = 0;\n"
    + "".join(f"ALTER TABLE memory_summaries ADD COLUMN {c};\n" for c in SCOPE_COLUMNS_DDL)
    + f"UPDATE memory_summaries SET {SCOPE_COLUMNS_FROM_DOC};\n"
    "CREATE INDEX memory_summaries_unscoped ON memory_summaries (workspace_id) WHERE scoped = 0;\n"
    "ALTER TABLE memory_triples ADD COLUMN session_id TEXT;\n"
    + "".join(f"ALTER TABLE memory_triples ADD COLUMN {c};\n" for c in SCOPE_COLUMNS_DDL)
    + f"UPDATE memory_triples SET session_id = json_extract(doc, '$.session_id'), {SCOPE_COLUMNS_FROM_DOC};\n"
    "CREATE INDEX memory_triples_unscoped ON memory_triples (workspace_id) WHERE scoped = 0;\n",
]

_TABLES: dict[MemoryTier, str] = {
    "message": "memory_messages",
    "summary": "memory_summaries",
    "fact": "memory_triples",
}
_MODELS: dict[MemoryTier, type[MemoryRecord] | type[Summary] | type[Triple]] = {
    "message": MemoryRecord,
    "summary": Summary,
    "fact": Triple,
}


def _check_workspace(expected: str, actual: str, what: str) -> None:
    # A record carrying another workspace's id is a caller bug that would leak data across
    # workspaces if stored under the caller's scope, so it is refused outright.
    if actual != expected:
        raise ValueError(f"{what} belongs to workspace {actual!r}, not {expected!r}")


def migrate(db: Database) -> None:
    """Create or upgrade the memory tables (the session store writes Tier 1 in its transaction)."""
    db.migrate("memory", _MIGRATIONS)


def insert_messages(conn: apsw.Connection, workspace_id: str, records: Sequence[MemoryRecord]) -> None:
    """Tier-1 rows, inside the caller's transaction (append_messages, and a session's save)."""
    for record in records:
        _check_workspace(workspace_id, record.workspace_id, f"memory record {record.id}")
    for record in records:
        # The first write of an id wins: a redelivered turn re-appending the same messages must
        # not rewrite or duplicate them.
        conn.execute(
            "INSERT INTO memory_messages (workspace_id, id, session_id, seq, doc, scoped) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, id) DO NOTHING",
            (
                workspace_id,
                record.id,
                record.session_id,
                record.seq,
                serde.dumps(record),
                int(record.scope is not None),
            ),
        )


class SqliteMemoryStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        migrate(db)

    # ------------------------------------------------------------------ Tier 1

    def append_messages(self, workspace_id: str, records: Sequence[MemoryRecord]) -> None:
        if not records:
            return
        with self._db.transaction() as conn:
            insert_messages(conn, workspace_id, records)

    def get_messages(
        self, workspace_id: str, session_id: str, *, after_seq: int = -1, limit: int = 100
    ) -> list[MemoryRecord]:
        rows = self._db.query(
            "SELECT doc FROM memory_messages WHERE workspace_id = ? AND session_id = ? AND seq > ? "
            "ORDER BY seq, id LIMIT ?",
            (workspace_id, session_id, after_seq, max(0, limit)),
        )
        return [serde.loads(MemoryRecord, r[0]) for r in rows]

    def recent_messages(self, workspace_id: str, session_id: str, *, limit: int = 20) -> list[MemoryRecord]:
        rows = self._db.query(
            "SELECT doc FROM memory_messages WHERE workspace_id = ? AND session_id = ? "
            "ORDER BY seq DESC, id DESC LIMIT ?",
            (workspace_id, session_id, max(0, limit)),
        )
        return [serde.loads(MemoryRecord, r[0]) for r in reversed(rows)]

    def count_messages(self, workspace_id: str, session_id: str) -> int:
        row = self._db.query_one(
            "SELECT COUNT(*) FROM memory_messages WHERE workspace_id = ? AND session_id = ?",
            (workspace_id, session_id),
        )
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ Tier 2

    def put_summary(self, summary: Summary) -> None:
        self._db.execute(
            "INSERT INTO memory_summaries (workspace_id, id, session_id, start_us, end_us, doc, "
            "scoped, scope_conversation, scope_users, scope_shared) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, id) DO UPDATE SET "
            "session_id = excluded.session_id, start_us = excluded.start_us, "
            "end_us = excluded.end_us, doc = excluded.doc, scoped = excluded.scoped, "
            "scope_conversation = excluded.scope_conversation, scope_users = excluded.scope_users, "
            "scope_shared = excluded.scope_shared",
            (
                summary.workspace_id,
                summary.id,
                summary.session_id,
                to_us(summary.start_at),
                to_us(summary.end_at),
                serde.dumps(summary),
                *scope_columns(summary.scope),
            ),
        )

    def list_summaries(
        self,
        workspace_id: str,
        *,
        scope: RecallScope,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[Summary]:
        visible, params = scope_filter(scope)
        where = ["workspace_id = ?" + visible]
        params.insert(0, workspace_id)
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        # Overlap, not containment: a summary spanning the range's edge still covers part of it.
        if start is not None:
            where.append("end_us >= ?")
            params.append(to_us(start))
        if end is not None:
            where.append("start_us <= ?")
            params.append(to_us(end))
        params.append(max(0, limit))
        rows = self._db.query(
            f"SELECT doc FROM memory_summaries WHERE {' AND '.join(where)} ORDER BY start_us, id LIMIT ?",
            params,
        )
        return [serde.loads(Summary, r[0]) for r in rows]

    def delete_summaries(self, workspace_id: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._db.transaction() as conn:
            conn.executemany(
                "DELETE FROM memory_summaries WHERE workspace_id = ? AND id = ?",
                [(workspace_id, summary_id) for summary_id in ids],
            )

    def delete_messages(self, workspace_id: str, session_id: str, ids: Sequence[str] | None = None) -> int:
        with self._db.transaction() as conn:
            if ids is None:
                conn.execute(
                    "DELETE FROM memory_messages WHERE workspace_id = ? AND session_id = ?",
                    (workspace_id, session_id),
                )
                return int(conn.changes())
            deleted = 0
            for record_id in ids:
                conn.execute(
                    "DELETE FROM memory_messages WHERE workspace_id = ? AND session_id = ? AND id = ?",
                    (workspace_id, session_id, record_id),
                )
                deleted += int(conn.changes())
            return deleted

    # ------------------------------------------------------------------ Tier 3

    _UPSERT_TRIPLE = (
        "INSERT INTO memory_triples (workspace_id, id, subject_key, object_key, updated_us, status, doc, "
        "session_id, scoped, scope_conversation, scope_users, scope_shared) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, id) DO UPDATE SET "
        "subject_key = excluded.subject_key, object_key = excluded.object_key, "
        "updated_us = excluded.updated_us, status = excluded.status, doc = excluded.doc, "
        "session_id = excluded.session_id, scoped = excluded.scoped, "
        "scope_conversation = excluded.scope_conversation, scope_users = excluded.scope_users, "
        "scope_shared = excluded.scope_shared"
    )

    @staticmethod
    def _triple_row(triple: Triple) -> tuple[object, ...]:
        return (
            triple.workspace_id,
            triple.id,
            normalize_key(triple.subject),
            normalize_key(triple.object),
            to_us(triple.updated_at),
            triple.status,
            serde.dumps(triple),
            triple.session_id,
            *scope_columns(triple.scope),
        )

    def put_triple(self, triple: Triple) -> None:
        self._db.execute(self._UPSERT_TRIPLE, self._triple_row(triple))

    def replace_triple(self, expected: Triple, new: Triple) -> bool:
        _check_workspace(expected.workspace_id, new.workspace_id, f"triple {new.id}")
        if new.id != expected.id:
            raise ValueError(f"replacing triple {expected.id} with another id, {new.id}")
        # Read, compare and write under the write lock. Compared as models, not as text, so a
        # document stored before a field was added still matches what was read from it.
        with self._db.transaction() as conn:
            row = conn.execute(
                "SELECT doc FROM memory_triples WHERE workspace_id = ? AND id = ?",
                (expected.workspace_id, expected.id),
            ).fetchone()
            if row is None or serde.loads(Triple, str(row[0])) != expected:
                return False
            conn.execute(self._UPSERT_TRIPLE, self._triple_row(new))
        return True

    def put_triples(self, workspace_id: str, triples: Sequence[Triple]) -> None:
        for triple in triples:
            _check_workspace(workspace_id, triple.workspace_id, f"triple {triple.id}")
        if not triples:
            return
        rows = [self._triple_row(triple) for triple in triples]
        with self._db.transaction() as conn:
            conn.executemany(self._UPSERT_TRIPLE, rows)

    def list_triples(
        self, workspace_id: str, *, scope: RecallScope, after: str | None = None, limit: int = 500
    ) -> list[Triple]:
        # The primary key (workspace_id, id) is the order, so a page is one index range.
        visible, params = scope_filter(scope)
        rows = self._db.query(
            f"SELECT doc FROM memory_triples WHERE workspace_id = ? AND id > ?{visible} ORDER BY id LIMIT ?",
            (workspace_id, "" if after is None else after, *params, max(0, limit)),
        )
        return [serde.loads(Triple, r[0]) for r in rows]

    def triples_by_subject(
        self, workspace_id: str, subject: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        return self._triples_by("subject_key", workspace_id, subject, scope, limit)

    def triples_by_object(
        self, workspace_id: str, obj: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        return self._triples_by("object_key", workspace_id, obj, scope, limit)

    def _triples_by(
        self, column: str, workspace_id: str, value: str, scope: RecallScope, limit: int
    ) -> list[Triple]:
        key = normalize_key(value)
        if not key:
            return []
        visible, params = scope_filter(scope)
        rows = self._db.query(
            f"SELECT doc FROM memory_triples WHERE workspace_id = ? AND {column} = ? AND status = 'active'"
            f"{visible} ORDER BY updated_us DESC, id LIMIT ?",
            (workspace_id, key, *params, max(0, limit)),
        )
        return [serde.loads(Triple, r[0]) for r in rows]

    def delete_triple(self, workspace_id: str, triple_id: str) -> None:
        self._db.execute(
            "DELETE FROM memory_triples WHERE workspace_id = ? AND id = ?", (workspace_id, triple_id)
        )

    def delete_triples(self, workspace_id: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._db.transaction() as conn:
            conn.executemany(
                "DELETE FROM memory_triples WHERE workspace_id = ? AND id = ?",
                [(workspace_id, triple_id) for triple_id in ids],
            )

    # ------------------------------------------------------------------ scopes

    def unscoped(self, workspace_id: str, *, limit: int = 200) -> list[MemoryRecord | Summary | Triple]:
        found: list[MemoryRecord | Summary | Triple] = []
        for tier, table in _TABLES.items():
            if len(found) >= limit:
                break
            # The partial index on (workspace_id) WHERE scoped = 0 holds exactly these rows.
            rows = self._db.query(
                f"SELECT doc FROM {table} WHERE workspace_id = ? AND scoped = 0 ORDER BY id LIMIT ?",
                (workspace_id, limit - len(found)),
            )
            found.extend(serde.loads(_MODELS[tier], r[0]) for r in rows)
        return found

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, tuple[MemoryTier, MemoryScope]]) -> int:
        stamped = 0
        with self._db.transaction() as conn:
            for record_id, (tier, scope) in scopes.items():
                table = _TABLES[tier]
                row = conn.execute(
                    f"SELECT doc FROM {table} WHERE workspace_id = ? AND id = ?", (workspace_id, record_id)
                ).fetchone()
                if row is None:
                    continue
                record: Any = serde.loads(_MODELS[tier], str(row[0])).model_copy(update={"scope": scope})
                if tier == "message":
                    conn.execute(
                        "UPDATE memory_messages SET doc = ?, scoped = 1 WHERE workspace_id = ? AND id = ?",
                        (serde.dumps(record), workspace_id, record_id),
                    )
                else:
                    conn.execute(
                        f"UPDATE {table} SET doc = ?, scoped = ?, scope_conversation = ?, scope_users = ?, "
                        "scope_shared = ? WHERE workspace_id = ? AND id = ?",
                        (serde.dumps(record), *scope_columns(scope), workspace_id, record_id),
                    )
                stamped += 1
        return stamped
