"""MemoryIndex on SQLite: FTS5 for BM25 and sqlite-vec for k-NN, in one file.

`index_docs` holds each document once; its rowid is the rowid of the document's FTS5 row and of
its vector in the vec0 table of the vector's dimension. Vector tables are made on first use, one
per dimension, so switching embedding models never mixes incomparable vectors. The workspace is
vec0's partition key, and tier and session are metadata columns, so k-NN filters before ranking
and k hits come back even when most of the index belongs to other workspaces or tiers.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Sequence

import apsw

from shared import serde
from shared.adapters.embedded.db import Database, first
from shared.memory.vectors import usable_vector
from shared.models import IndexDoc, IndexHit, IndexQuery, IndexResult

logger = logging.getLogger(__name__)

MAX_DIMENSIONS = 8192

_MIGRATIONS = [
    """
    CREATE TABLE index_docs (
        rowid INTEGER PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tier TEXT NOT NULL,
        dim INTEGER,
        doc TEXT NOT NULL,
        UNIQUE (workspace_id, id)
    );
    CREATE INDEX index_docs_by_filter ON index_docs (workspace_id, tier, session_id);
    CREATE VIRTUAL TABLE index_fts USING fts5(text, tokenize = 'porter unicode61 remove_diacritics 2');
    """,
]

# Letters and digits only: quotes, operators and column filters of the FTS5 query language
# cannot survive, so user text can never change the shape of the MATCH expression.
_TOKEN = re.compile(r"[^\W_]+")


def fts_match_query(text: str, *, max_terms: int = 32) -> str | None:
    """User text as a safe FTS5 query: each distinct token quoted, OR-ed; None when nothing is left."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text):
        seen.setdefault(token.casefold(), None)
        if len(seen) >= max_terms:
            break
    if not seen:
        return None
    return " OR ".join(f'"{token}"' for token in seen)


def _pack(vector: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def _vec_table(dim: int) -> str:
    return f"index_vec_{int(dim)}"


class SqliteMemoryIndex:
    """The memory index. `db` must have been opened with load_vec=True."""

    def __init__(self, db: Database, *, max_query_terms: int = 32) -> None:
        self._db = db
        self._max_query_terms = max_query_terms
        try:
            db.query("SELECT vec_version()")
        except apsw.SQLError as exc:
            raise RuntimeError("the memory index needs a Database opened with load_vec=True") from exc
        db.migrate("index", _MIGRATIONS)
        self._known_dims: set[int] = set()

    # ------------------------------------------------------------------ writes

    def upsert(self, workspace_id: str, docs: Sequence[IndexDoc]) -> None:
        for doc in docs:
            if doc.workspace_id != workspace_id:
                raise ValueError(f"index doc {doc.id} belongs to workspace {doc.workspace_id!r}")
            if doc.vector is not None and not 1 <= len(doc.vector) <= MAX_DIMENSIONS:
                raise ValueError(f"index doc {doc.id}: vector has {len(doc.vector)} dimensions")
        if not docs:
            return
        with self._db.transaction() as conn:
            for doc in docs:
                self._remove(conn, workspace_id, doc.id)
                vector = doc.vector if usable_vector(doc.vector) else None
                if doc.vector is not None and vector is None:
                    logger.warning("index doc %s: vector is zero or not finite; text only", doc.id)
                dim = len(vector) if vector else None
                conn.execute(
                    "INSERT INTO index_docs (workspace_id, id, session_id, tier, dim, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (workspace_id, doc.id, doc.session_id or "", doc.tier, dim, serde.dumps(doc)),
                )
                rowid = conn.last_insert_rowid()
                conn.execute("INSERT INTO index_fts (rowid, text) VALUES (?, ?)", (rowid, doc.text))
                if vector and dim:
                    self._ensure_vec_table(conn, dim)
                    conn.execute(
                        f"INSERT INTO {_vec_table(dim)} (rowid, workspace_id, embedding, tier, session_id) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (rowid, workspace_id, _pack(vector), doc.tier, doc.session_id or ""),
                    )

    def delete(self, workspace_id: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._db.transaction() as conn:
            for doc_id in ids:
                self._remove(conn, workspace_id, doc_id)

    def _remove(self, conn: apsw.Connection, workspace_id: str, doc_id: str) -> None:
        row = first(
            conn,
            "SELECT rowid, dim FROM index_docs WHERE workspace_id = ? AND id = ?",
            (workspace_id, doc_id),
        )
        if row is None:
            return
        rowid, dim = int(row[0]), row[1]
        conn.execute("DELETE FROM index_fts WHERE rowid = ?", (rowid,))
        if dim:
            conn.execute(f"DELETE FROM {_vec_table(int(dim))} WHERE rowid = ?", (rowid,))
        conn.execute("DELETE FROM index_docs WHERE rowid = ?", (rowid,))

    def _ensure_vec_table(self, conn: apsw.Connection, dim: int) -> None:
        # Not cached: the enclosing transaction may still roll the new table back.
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {_vec_table(dim)} USING vec0("
            f"workspace_id text partition key, embedding float[{dim}] distance_metric=cosine, "
            "tier text, session_id text)"
        )

    def _has_vec_table(self, conn: apsw.Connection, dim: int) -> bool:
        # Only committed tables are seen here, and tables are never dropped, so a yes is final.
        if dim in self._known_dims:
            return True
        row = first(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_vec_table(dim),))
        if row is not None:
            self._known_dims.add(dim)
        return row is not None

    # ------------------------------------------------------------------ reads

    def search(self, workspace_id: str, query: IndexQuery) -> IndexResult:
        if query.tiers is not None and not query.tiers:
            return IndexResult()
        with self._db.snapshot() as conn:
            text_hits = self._text_hits(conn, workspace_id, query) if query.text else []
            vector_hits = self._vector_hits(conn, workspace_id, query) if query.vector else []
        return IndexResult(text_hits=text_hits, vector_hits=vector_hits)

    def _filters(self, query: IndexQuery, prefix: str) -> tuple[str, list[object]]:
        sql: str = ""
        params: list[object] = []
        if query.tiers is not None:
            sql += f" AND {prefix}tier IN ({', '.join('?' for _ in query.tiers)})"
            params.extend(query.tiers)
        if query.session_id is not None:
            sql += f" AND {prefix}session_id = ?"
            params.append(query.session_id)
        return sql, params

    def _text_hits(self, conn: apsw.Connection, workspace_id: str, query: IndexQuery) -> list[IndexHit]:
        match = fts_match_query(query.text or "", max_terms=self._max_query_terms)
        if match is None:
            return []
        filters, params = self._filters(query, "d.")
        rows = conn.execute(
            "SELECT d.doc, -bm25(index_fts) FROM index_fts JOIN index_docs d ON d.rowid = index_fts.rowid "
            f"WHERE index_fts MATCH ? AND d.workspace_id = ?{filters} "
            "ORDER BY bm25(index_fts), d.rowid LIMIT ?",
            [match, workspace_id, *params, query.k],
        )
        return [IndexHit(doc=serde.loads(IndexDoc, doc), score=float(score)) for doc, score in rows]

    def _vector_hits(self, conn: apsw.Connection, workspace_id: str, query: IndexQuery) -> list[IndexHit]:
        vector = query.vector
        if not vector or not usable_vector(vector) or len(vector) > MAX_DIMENSIONS:
            return []
        dim = len(vector)
        if not self._has_vec_table(conn, dim):
            return []
        filters, params = self._filters(query, "")
        ranked = [
            (int(rowid), float(distance))
            for rowid, distance in conn.execute(
                f"SELECT rowid, distance FROM {_vec_table(dim)} "
                f"WHERE embedding MATCH ? AND k = ? AND workspace_id = ?{filters} ORDER BY distance",
                [_pack(vector), query.k, workspace_id, *params],
            )
            if distance is not None
        ]
        if not ranked:
            return []
        docs = {
            int(rowid): doc
            for rowid, doc in conn.execute(
                f"SELECT rowid, doc FROM index_docs WHERE workspace_id = ? "
                f"AND rowid IN ({', '.join('?' for _ in ranked)})",
                [workspace_id, *(rowid for rowid, _ in ranked)],
            )
        }
        return [
            IndexHit(doc=serde.loads(IndexDoc, docs[rowid]), score=1.0 - distance)
            for rowid, distance in ranked
            if rowid in docs
        ]

    def count(self, workspace_id: str) -> int:
        row = self._db.query_one("SELECT COUNT(*) FROM index_docs WHERE workspace_id = ?", (workspace_id,))
        return int(row[0]) if row else 0
