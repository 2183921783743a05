"""One SQLite file opened through apsw: a connection per thread, WAL, busy timeout, migrations.

apsw rather than the standard sqlite3 module because the interpreter's sqlite3 here cannot load
extensions, and the memory index needs sqlite-vec. Lane workers, the HTTP server's threads and the
scheduler all use the same adapters at once, so each thread gets its own connection (a SQLite
connection must not run two statements from two threads at the same time) and writers queue on
the busy timeout instead of failing.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec

from shared.adapters.embedded.owner_only import private_database
from shared.models import MemoryScope, RecallScope

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]

_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    component TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    applied_at TEXT NOT NULL
) WITHOUT ROWID
"""


def to_us(dt: datetime) -> int:
    """Microseconds since the epoch: exact, and comparable in SQL whatever the offset was.

    A naive datetime is taken as UTC, which is what every model's default factory produces.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class DatabaseClosed(RuntimeError):
    """The adapter was used after its backend was closed."""


def first(conn: apsw.Connection, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
    """The first row of a query inside a transaction, with the statement finished."""
    rows = list(conn.execute(sql, params))
    return rows[0] if rows else None


class _Local(threading.local):
    conn: apsw.Connection | None = None
    depth: int = 0


class Database:
    """A SQLite database file shared by several adapters and many threads."""

    def __init__(
        self,
        path: Path,
        *,
        load_vec: bool = False,
        busy_timeout_ms: int = 10_000,
    ) -> None:
        self.path = Path(path)
        # Before SQLite creates it 0644: a database holds conversations and memory.
        private_database(self.path)
        self._load_vec = load_vec
        self._busy_timeout_ms = busy_timeout_ms
        self._local = _Local()
        self._lock = threading.Lock()
        # Connections by thread, so close() can reach every one and a dead thread's is reclaimed.
        self._conns: dict[int, tuple[weakref.ref[threading.Thread], apsw.Connection]] = {}
        self._closed = False
        # The first connection switches the file to WAL; doing it here, before any worker thread
        # exists, avoids two threads racing to change the journal mode.
        list(self.connection().execute(_SCHEMA_TABLE))

    # ------------------------------------------------------------------ connections

    def connection(self) -> apsw.Connection:
        """This thread's connection, opened on first use."""
        if self._closed:
            raise DatabaseClosed(f"database {self.path.name} is closed")
        conn = self._local.conn
        if conn is not None:
            return conn
        conn = self._open()
        self._local.conn = conn
        current = threading.current_thread()
        stale: list[apsw.Connection] = []
        with self._lock:
            for ident, (ref, other) in list(self._conns.items()):
                thread = ref()
                if thread is None or not thread.is_alive():
                    stale.append(other)
                    del self._conns[ident]
            self._conns[current.ident or 0] = (weakref.ref(current), conn)
        for other in stale:
            other.close(True)
        return conn

    def _open(self) -> apsw.Connection:
        conn = apsw.Connection(str(self.path))
        conn.setbusytimeout(self._busy_timeout_ms)
        if self._load_vec:
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec.loadable_path())
            # Loading is only needed once per connection; leaving it on would let SQL load code.
            conn.enable_load_extension(False)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across application crashes in WAL mode; only an OS crash can lose
        # the last transactions, which a local gateway accepts for far fewer fsyncs.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        # Deleted rows are overwritten, not left in free pages: what an erasure deletes is gone
        # from the file, not just from every query.
        conn.execute("PRAGMA secure_delete=ON")
        return conn

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = [conn for _, conn in self._conns.values()]
            self._conns.clear()
        for conn in conns:
            conn.close(True)
        self._local = _Local()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ statements

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        """All rows at once, so no statement is left open holding a read snapshot."""
        return list(self.connection().execute(sql, params))

    def query_one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""
        conn = self.connection()
        list(conn.execute(sql, params))
        return int(conn.changes())

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """A write transaction, taken up front (BEGIN IMMEDIATE).

        A deferred transaction that reads and then writes can fail with SQLITE_BUSY at the write
        without waiting on the busy timeout; taking the write lock first makes read-check-write
        sequences (version checks, next sequence numbers) wait their turn instead. Nested use
        becomes a savepoint.
        """
        conn = self.connection()
        local = self._local
        if local.depth:
            name = f"sp{local.depth}"
            conn.execute(f"SAVEPOINT {name}")
            local.depth += 1
            try:
                yield conn
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            else:
                conn.execute(f"RELEASE {name}")
            finally:
                local.depth -= 1
            return
        conn.execute("BEGIN IMMEDIATE")
        local.depth = 1
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            local.depth = 0

    @contextmanager
    def snapshot(self) -> Iterator[apsw.Connection]:
        """A read transaction: several queries see one consistent state of the file."""
        conn = self.connection()
        if self._local.depth:
            yield conn
            return
        conn.execute("BEGIN DEFERRED")
        self._local.depth = 1
        try:
            yield conn
        finally:
            self._local.depth = 0
            if conn.in_transaction:
                conn.execute("COMMIT")

    # ------------------------------------------------------------------ schema

    def migrate(self, component: str, steps: Sequence[str]) -> None:
        """Apply the steps of `component` not applied yet; step i brings it to version i + 1.

        Steps are append-only: a released step is never edited, a change is a new step.
        """
        with self.transaction() as conn:
            row = first(conn, "SELECT version FROM schema_version WHERE component = ?", (component,))
            current = int(row[0]) if row else 0
            if current > len(steps):
                raise RuntimeError(
                    f"{self.path.name}: schema of {component!r} is version {current}, newer than this "
                    f"code ({len(steps)}); refusing to run an older Sigil against it"
                )
            for version in range(current, len(steps)):
                list(conn.execute(steps[version]))
            if current < len(steps):
                conn.execute(
                    "INSERT INTO schema_version (component, version, applied_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version, "
                    "applied_at = excluded.applied_at",
                    (component, len(steps), datetime.now(UTC).isoformat()),
                )
                logger.debug("migrated %s/%s to version %d", self.path.name, component, len(steps))

    def schema_version(self, component: str) -> int:
        row = self.query_one("SELECT version FROM schema_version WHERE component = ?", (component,))
        return int(row[0]) if row else 0


def scope_filter(scope: RecallScope, prefix: str = "") -> tuple[str, list[Any]]:
    """shared.memory.scope.visible as SQL: " AND (...)" over a table's scope columns.

    The columns (prefixed with `prefix`, a table alias and its dot): session_id,
    scope_conversation, scope_users (a JSON array) and scope_shared (0/1). A row written before
    scopes existed has NULL conversation and users and scope_shared 0, so only its session (or a
    workspace-wide read) reaches it. Empty for a workspace-wide scope; " AND 0" for one that
    admits nothing.
    """
    if scope.workspace_wide:
        return "", []
    clauses: list[str] = []
    params: list[Any] = []
    if scope.session_id is not None:
        clauses.append(f"{prefix}session_id = ?")
        params.append(scope.session_id)
    if scope.conversation is not None:
        clauses.append(f"{prefix}scope_conversation = ?")
        params.append(scope.conversation)
    if scope.users:
        # A record names one or two users: json_each over its array is a few steps per row.
        clauses.append(
            f"EXISTS (SELECT 1 FROM json_each({prefix}scope_users) "
            f"WHERE value IN ({', '.join('?' for _ in scope.users)}))"
        )
        params.extend(scope.users)
    if scope.shared:
        clauses.append(f"{prefix}scope_shared = 1")
    if not clauses:
        return " AND 0", []
    return f" AND ({' OR '.join(clauses)})", params


def scope_columns(scope: MemoryScope | None) -> tuple[int, str | None, str | None, int]:
    """(scoped, scope_conversation, scope_users, scope_shared) of a record, for scope_filter."""
    if scope is None:
        return 0, None, None, 0
    return 1, scope.conversation, json.dumps(list(scope.users)), int(scope.shared)


# The same columns filled from a stored document's JSON: a migration's backfill of rows written
# before the columns existed (their documents have no scope, so this gives 0, NULL, NULL, 0).
SCOPE_COLUMNS_FROM_DOC = (
    "scoped = json_extract(doc, '$.scope') IS NOT NULL, "
    "scope_conversation = json_extract(doc, '$.scope.conversation'), "
    "scope_users = json_extract(doc, '$.scope.users'), "
    "scope_shared = COALESCE(json_extract(doc, '$.scope.shared'), 0)"
)
SCOPE_COLUMNS_DDL = [
    "scoped INTEGER NOT NULL DEFAULT 0",
    "scope_conversation TEXT",
    "scope_users TEXT",
    "scope_shared INTEGER NOT NULL DEFAULT 0",
]
