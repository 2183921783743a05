"""MemoryIndex on SQLite: FTS5 for BM25 and sqlite-vec for k-NN, in one file.

`index_docs` holds each document once; its rowid is the rowid of the document's FTS5 row and of
its vector in the vec0 table of the vector's dimension. Vector tables are made on first use, one
per dimension, so switching embedding models never mixes incomparable vectors. The workspace is
vec0's partition key, and tier and session are metadata columns, so k-NN filters before ranking
and k hits come back even when most of the index belongs to other workspaces or tiers.

Scopes (shared.memory.scope.visible) are columns of `index_docs` (scope_conversation, scope_users
as a JSON array, scope_shared) matched by db.scope_filter: in the FTS5 query's WHERE, and for
k-NN as a `rowid IN (...)` prefilter that sqlite-vec applies before ranking, as the in-memory copy
applies the same rule as a mask before its top-k.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import apsw
import numpy as np

from shared import serde
from shared.adapters.embedded.db import (
    SCOPE_COLUMNS_DDL,
    SCOPE_COLUMNS_FROM_DOC,
    Database,
    first,
    scope_columns,
    scope_filter,
    to_us,
)
from shared.adapters.embedded.index_cache import PREFILTER_MIN_ROWS, CachedDoc, Shard
from shared.memory.doc_keys import RECORD_ID_KEY
from shared.memory.search import CONTEXT_KEY, FACTS_KEY
from shared.memory.vectors import usable_vector
from shared.models import IndexDoc, IndexHit, IndexQuery, IndexResult, MemoryScope, MemoryTier

logger = logging.getLogger(__name__)

MAX_DIMENSIONS = 8192
# Documents held in memory across all cached workspaces (~2 KB each with a 384-dim vector): a
# workspace past this is searched in SQL instead; least recently searched workspaces go first.
DEFAULT_CACHE_MAX_DOCS = 500_000
_TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])

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
    # A second, lower-weighted column for the neighbouring messages the writer puts in metadata
    # "context". FTS5 cannot add a column, so the table is rebuilt (no document had a context).
    """
    CREATE VIRTUAL TABLE index_text USING fts5(
        text, context, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    INSERT INTO index_text (rowid, text, context) SELECT rowid, text, '' FROM index_fts;
    DROP TABLE index_fts;
    """,
    # The vector leaves the JSON document for a blob of float64 (exact, and ~3 KB instead of
    # ~8 KB of decimal text): a search parses up to 2k documents, and parsing 384 decimal
    # numbers per document was most of its time. Rows written before keep theirs in the JSON.
    """
    ALTER TABLE index_docs ADD COLUMN vector BLOB;
    """,
    # Bumped by every write transaction of a workspace, in that transaction: how a process's
    # in-memory copy of a workspace (index_cache.Shard) knows it is still current.
    """
    CREATE TABLE index_generations (
        workspace_id TEXT PRIMARY KEY,
        generation INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # Scopes: the columns db.scope_filter matches, and the record a document indexes (itself, or
    # the record its chunk names in metadata "record_id"), which stamp_scopes looks documents up
    # by. Documents written before have no scope: their own session and workspace-wide reads only.
    "".join(f"ALTER TABLE index_docs ADD COLUMN {c};\n" for c in ["record_id TEXT", *SCOPE_COLUMNS_DDL])
    + f"UPDATE index_docs SET record_id = COALESCE(json_extract(doc, '$.metadata.{RECORD_ID_KEY}'), id), "
    f"{SCOPE_COLUMNS_FROM_DOC};\n"
    "CREATE INDEX index_docs_by_record ON index_docs (workspace_id, record_id);\n",
    # The right to erasure: without secure-delete, FTS5 keeps a deleted document's terms in its
    # segments until it happens to merge them; with it, a delete removes them at once.
    "INSERT INTO index_text (index_text, rank) VALUES ('secure-delete', 1);\n",
    # When each memory was said (IndexDoc.created_at, microseconds since the epoch, db.to_us):
    # what a time-aware search filters on. Older rows get it from their JSON document (SQLite
    # reads the time to the millisecond; new rows are exact).
    "ALTER TABLE index_docs ADD COLUMN created_us INTEGER;\n"
    "UPDATE index_docs SET created_us = "
    "CAST(ROUND((julianday(json_extract(doc, '$.created_at')) - 2440587.5) * 86400000.0) AS INTEGER)"
    " * 1000;\n"
    "CREATE INDEX index_docs_by_time ON index_docs (workspace_id, created_us);\n",
    # A third column for the facts extracted from a message (metadata "facts": fact-augmented
    # keys, shared.memory.fact_keys), weighted apart from its words and its context. FTS5 cannot
    # add a column, so the table is rebuilt (no document had facts).
    """
    CREATE VIRTUAL TABLE index_text_v2 USING fts5(
        text, context, facts, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    INSERT INTO index_text_v2 (rowid, text, context, facts) SELECT rowid, text, context, '' FROM index_text;
    DROP TABLE index_text;
    ALTER TABLE index_text_v2 RENAME TO index_text;
    INSERT INTO index_text (index_text, rank) VALUES ('secure-delete', 1);
    """,
]

# BM25 weight of a document's context (metadata CONTEXT_KEY) relative to its own text.
DEFAULT_CONTEXT_WEIGHT = 0.5
# BM25 weight of the facts extracted from a document (metadata FACTS_KEY) relative to its own
# text: a fact restates what was said in a few plain words (bench/locomo.py measured it).
DEFAULT_FACTS_WEIGHT = 0.5

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


def _pack64(vector: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vector)}d", *vector)


def _load_doc(doc: str, vector: bytes | None) -> IndexDoc:
    parsed: IndexDoc = serde.loads(IndexDoc, doc)
    if vector is not None:
        # Plain assignment (no validation; IndexDoc does not validate assignments): these floats
        # were validated on the way in, and validating 384 of them per hit is not free.
        parsed.vector = np.frombuffer(vector, dtype="<f8").tolist()
    return parsed


# What a shard needs of a document, read by _cached_doc.
_CACHED_COLUMNS = (
    "d.rowid, d.id, d.tier, d.session_id, d.dim, d.vector, "
    "CASE WHEN d.vector IS NULL AND d.dim IS NOT NULL THEN d.doc END, t.text, t.context, "
    "d.scoped, d.scope_conversation, d.scope_users, d.scope_shared, d.created_us, t.facts"
)


def _cached_doc(row: Sequence[Any]) -> CachedDoc:
    rowid, doc_id, tier, session_id, dim, blob, legacy, text, context, scoped, conv, users, shared = row[:13]
    at, facts = row[13], row[14]
    vector: Sequence[float] | None = None
    if dim:  # set only for a usable vector
        if blob is not None:
            vector = struct.unpack(f"<{len(blob) // 8}d", blob)
        elif legacy is not None:
            vector = serde.loads(IndexDoc, legacy).vector
    # The columns, not the JSON document: parsing 100k documents would double a shard's build.
    scope = (
        MemoryScope(
            conversation=None if conv is None else str(conv),
            users=tuple(json.loads(str(users))) if users else (),
            shared=bool(shared),
        )
        if scoped
        else None
    )
    created = None if at is None else int(at)
    return CachedDoc(
        int(rowid),
        doc_id,
        tier,
        session_id,
        text or "",
        context or "",
        vector,
        scope,
        created,
        facts=facts or "",
    )


def _window(query: IndexQuery) -> tuple[int | None, int | None] | None:
    """The query's window on created_us (from inclusive, before exclusive); None: no window."""
    if query.created_from is None and query.created_before is None:
        return None
    return (
        None if query.created_from is None else to_us(query.created_from),
        None if query.created_before is None else to_us(query.created_before),
    )


def _time_filter(query: IndexQuery, prefix: str) -> tuple[str, list[object]]:
    """The query's window as SQL on index_docs' created_us; a row without one never matches."""
    sql = ""
    params: list[object] = []
    window = _window(query)
    if window is not None:
        if window[0] is not None:
            sql += f" AND {prefix}created_us >= ?"
            params.append(window[0])
        if window[1] is not None:
            sql += f" AND {prefix}created_us < ?"
            params.append(window[1])
    return sql, params


def _vec_table(dim: int) -> str:
    return f"index_vec_{int(dim)}"


class SqliteMemoryIndex:
    """The memory index. `db` must have been opened with load_vec=True.

    Searches run on an in-memory copy of the workspace (index_cache.Shard) when it fits in
    `cache_max_docs`; `cache_max_docs=0` searches FTS5 and sqlite-vec directly. Both give the
    same rankings up to BM25's statistics, which the copy takes per workspace. The copy's k-NN is
    exact below `knn_exact_below` vectors in a workspace and prefiltered by sign bits above.
    """

    def __init__(
        self,
        db: Database,
        *,
        max_query_terms: int = 32,
        context_weight: float = DEFAULT_CONTEXT_WEIGHT,
        facts_weight: float = DEFAULT_FACTS_WEIGHT,
        cache_max_docs: int = DEFAULT_CACHE_MAX_DOCS,
        knn_exact_below: int = PREFILTER_MIN_ROWS,
    ) -> None:
        if not 0.0 <= context_weight <= 1.0:
            raise ValueError("context_weight must be between 0 and 1")
        if not 0.0 <= facts_weight <= 1.0:
            raise ValueError("facts_weight must be between 0 and 1")
        self._facts_weight = float(facts_weight)
        self._db = db
        self._max_query_terms = max_query_terms
        self._context_weight = float(context_weight)
        self._cache_max_docs = cache_max_docs
        self._knn_exact_below = knn_exact_below
        try:
            db.query("SELECT vec_version()")
        except apsw.SQLError as exc:
            raise RuntimeError("the memory index needs a Database opened with load_vec=True") from exc
        db.migrate("index", _MIGRATIONS)
        self._known_dims: set[int] = set()
        # Guards the shards and the tokenizer (an apsw connection of its own, used only here).
        self._lock = threading.Lock()
        self._shards: dict[str, Shard] = {}
        self._tokenizer_db = apsw.Connection(":memory:")
        self._tokenizer = self._tokenizer_db.fts5_tokenizer(*_TOKENIZER)

    # ------------------------------------------------------------------ writes

    def upsert(self, workspace_id: str, docs: Sequence[IndexDoc]) -> None:
        for doc in docs:
            if doc.workspace_id != workspace_id:
                raise ValueError(f"index doc {doc.id} belongs to workspace {doc.workspace_id!r}")
            if doc.vector is not None and not 1 <= len(doc.vector) <= MAX_DIMENSIONS:
                raise ValueError(f"index doc {doc.id}: vector has {len(doc.vector)} dimensions")
        if not docs:
            return
        nested = self._db.connection().in_transaction
        added: list[CachedDoc] = []
        with self._db.transaction() as conn:
            generation = self._bump(conn, workspace_id)
            for doc in docs:
                self._remove(conn, workspace_id, doc.id)
                vector = doc.vector if usable_vector(doc.vector) else None
                if doc.vector is not None and vector is None:
                    logger.warning("index doc %s: vector is zero or not finite; text only", doc.id)
                dim = len(vector) if vector else None
                context = doc.metadata.get(CONTEXT_KEY, "")
                facts = doc.metadata.get(FACTS_KEY, "")
                conn.execute(
                    "INSERT INTO index_docs (workspace_id, id, session_id, tier, dim, doc, vector, "
                    "record_id, scoped, scope_conversation, scope_users, scope_shared, created_us) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        workspace_id,
                        doc.id,
                        doc.session_id or "",
                        doc.tier,
                        dim,
                        serde.dumps(doc.model_copy(update={"vector": None})),
                        _pack64(doc.vector) if doc.vector is not None else None,
                        doc.metadata.get(RECORD_ID_KEY, doc.id),
                        *scope_columns(doc.scope),
                        to_us(doc.created_at),
                    ),
                )
                rowid = conn.last_insert_rowid()
                conn.execute(
                    "INSERT INTO index_text (rowid, text, context, facts) VALUES (?, ?, ?, ?)",
                    (rowid, doc.text, context, facts),
                )
                if vector and dim:
                    self._ensure_vec_table(conn, dim)
                    conn.execute(
                        f"INSERT INTO {_vec_table(dim)} (rowid, workspace_id, embedding, tier, session_id) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (rowid, workspace_id, _pack(vector), doc.tier, doc.session_id or ""),
                    )
                added.append(
                    CachedDoc(
                        rowid,
                        doc.id,
                        doc.tier,
                        doc.session_id or "",
                        doc.text,
                        context,
                        vector,
                        doc.scope,
                        to_us(doc.created_at),
                        facts=facts,
                    )
                )
        self._after_write(workspace_id, generation, nested, [d.id for d in docs], added)

    def delete(self, workspace_id: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        nested = self._db.connection().in_transaction
        with self._db.transaction() as conn:
            generation = self._bump(conn, workspace_id)
            for doc_id in ids:
                self._remove(conn, workspace_id, doc_id)
        self._after_write(workspace_id, generation, nested, list(ids), [])

    def _bump(self, conn: apsw.Connection, workspace_id: str) -> int:
        """The workspace's generation before this write; the stored one is now one more."""
        row = first(conn, "SELECT generation FROM index_generations WHERE workspace_id = ?", (workspace_id,))
        before = int(row[0]) if row else 0
        conn.execute(
            "INSERT INTO index_generations (workspace_id, generation) VALUES (?, ?) "
            "ON CONFLICT (workspace_id) DO UPDATE SET generation = excluded.generation",
            (workspace_id, before + 1),
        )
        return before

    def _after_write(
        self, workspace_id: str, before: int, nested: bool, removed: list[str], added: list[CachedDoc]
    ) -> None:
        """Bring this process's copy of the workspace along with a committed write."""
        with self._lock:
            shard = self._shards.get(workspace_id)
            if shard is None:
                return
            # Inside a caller's transaction the write may still roll back; and a shard that missed
            # another writer's change would go on missing it. Either way: rebuild when next needed.
            if nested or shard.generation != before:
                del self._shards[workspace_id]
                return
            for doc_id in removed:
                shard.remove(doc_id)
            for doc in added:
                shard.add(doc)
            shard.generation = before + 1
            if shard.dead > max(1024, shard.live):
                del self._shards[workspace_id]  # mostly dead positions: rebuilt compact on next use

    def _remove(self, conn: apsw.Connection, workspace_id: str, doc_id: str) -> None:
        row = first(
            conn,
            "SELECT rowid, dim FROM index_docs WHERE workspace_id = ? AND id = ?",
            (workspace_id, doc_id),
        )
        if row is None:
            return
        rowid, dim = int(row[0]), row[1]
        conn.execute("DELETE FROM index_text WHERE rowid = ?", (rowid,))
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
        vector = query.vector
        if vector is not None and (not usable_vector(vector) or len(vector) > MAX_DIMENSIONS):
            vector = None
        ranked = self._cached_rankings(workspace_id, query, vector)
        with self._db.snapshot() as conn:
            if ranked is None:
                text_hits = self._text_hits(conn, workspace_id, query) if query.text else []
                vector_hits = self._vector_hits(conn, workspace_id, query, vector) if vector else []
                return IndexResult(text_hits=text_hits, vector_hits=vector_hits)
            text_ranked, vector_ranked = ranked
            wanted = {rowid for rowid, _ in [*text_ranked, *vector_ranked]}
            docs = self._load(conn, workspace_id, wanted, vectors=query.with_vectors)
        return IndexResult(
            text_hits=[IndexHit(doc=docs[r], score=s) for r, s in text_ranked if r in docs],
            vector_hits=[IndexHit(doc=docs[r], score=s) for r, s in vector_ranked if r in docs],
        )

    def _cached_rankings(
        self, workspace_id: str, query: IndexQuery, vector: list[float] | None
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]] | None:
        """Both rankings as (rowid, score) from the workspace's shard; None: search in SQL."""
        if self._cache_max_docs <= 0:
            return None
        with self._lock:
            shard = self._shard(workspace_id)
            if shard is None:
                return None
            text: list[tuple[int, float]] = []
            if query.text:
                terms = self._terms(query.text, apsw.FTS5_TOKENIZE_QUERY)[: self._max_query_terms]
                text = shard.text_search(
                    terms, query.k, query.tiers, query.session_id, query.scope, window=_window(query)
                )
            vec = (
                shard.vector_search(
                    vector, query.k, query.tiers, query.session_id, query.scope, window=_window(query)
                )
                if vector
                else []
            )
            return text, vec

    def _terms(self, text: str, reason: int) -> list[str]:
        tokens = self._tokenizer(
            text.encode("utf-8", errors="replace"),
            reason,
            None,
            include_offsets=False,
            include_colocated=False,
        )
        return list(dict.fromkeys(str(t) for t in tokens))

    def _tokenize_document(self, text: str) -> list[str]:
        return [
            str(t)
            for t in self._tokenizer(
                text.encode("utf-8", errors="replace"),
                apsw.FTS5_TOKENIZE_DOCUMENT,
                None,
                include_offsets=False,
                include_colocated=False,
            )
        ]

    def _shard(self, workspace_id: str) -> Shard | None:
        """The workspace's current shard (built or rebuilt as needed); None when it can't fit.
        Called with the lock held."""
        row = self._db.query_one(
            "SELECT generation FROM index_generations WHERE workspace_id = ?", (workspace_id,)
        )
        generation = int(row[0]) if row else 0
        shard = self._shards.get(workspace_id)
        if shard is None or shard.generation != generation:
            self._shards.pop(workspace_id, None)
            shard = self._build(workspace_id)
            if shard is None:
                return None
            self._shards[workspace_id] = shard
        shard.last_used = time.monotonic()
        return shard

    def _build(self, workspace_id: str) -> Shard | None:
        began = time.perf_counter()
        with self._db.snapshot() as conn:
            row = first(
                conn, "SELECT generation FROM index_generations WHERE workspace_id = ?", (workspace_id,)
            )
            generation = int(row[0]) if row else 0
            count_row = first(conn, "SELECT COUNT(*) FROM index_docs WHERE workspace_id = ?", (workspace_id,))
            count = int(count_row[0]) if count_row else 0
            if count > self._cache_max_docs:
                return None
            self._evict(room_for=count)
            shard = Shard(
                generation,
                self._tokenize_document,
                self._context_weight,
                prefilter_min_rows=self._knn_exact_below,
                facts_weight=self._facts_weight,
            )
            rows = conn.execute(
                f"SELECT {_CACHED_COLUMNS} FROM index_docs d JOIN index_text t ON t.rowid = d.rowid "
                "WHERE d.workspace_id = ? ORDER BY d.rowid",
                (workspace_id,),
            )
            for row in rows:
                shard.add(_cached_doc(row))
        if count >= 10_000:
            logger.info(
                "memory index: %d documents of a workspace loaded in %.1f s",
                count,
                time.perf_counter() - began,
                extra={"workspace_id": workspace_id},
            )
        return shard

    def _evict(self, *, room_for: int) -> None:
        held = sum(s.size for s in self._shards.values())
        for ws, shard in sorted(self._shards.items(), key=lambda kv: kv[1].last_used):
            if held + room_for <= self._cache_max_docs:
                break
            held -= shard.size
            del self._shards[ws]

    def _load(
        self, conn: apsw.Connection, workspace_id: str, rowids: set[int], *, vectors: bool = True
    ) -> dict[int, IndexDoc]:
        if not rowids:
            return {}
        vector_column = "vector" if vectors else "NULL"
        wanted = list(rowids)
        docs: dict[int, IndexDoc] = {}
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            # "+workspace_id": a check, not an index to search by. With a plain equality SQLite
            # walks the workspace's index entries (all 100k of them) instead of looking up 160 rowids.
            for rowid, doc, blob in conn.execute(
                f"SELECT rowid, doc, {vector_column} FROM index_docs "
                f"WHERE rowid IN ({', '.join('?' for _ in part)}) "
                "AND +workspace_id = ?",
                [*part, workspace_id],
            ):
                docs[int(rowid)] = _load_doc(doc, blob)
        return docs

    # ------------------------------------------------------------------ reads in SQL

    def _filters(self, query: IndexQuery, prefix: str) -> tuple[str, list[object]]:
        """Tier and session filters, on index_docs (prefix "d.") or a vec0 table's metadata ("")."""
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
        visible, scope_params = scope_filter(query.scope, "d.")
        filters += visible
        params += scope_params
        during, time_params = _time_filter(query, "d.")
        filters += during
        params += time_params
        rank = f"bm25(index_text, 1.0, {self._context_weight!r}, {self._facts_weight!r})"
        # Rowids first, documents after: SQLite would otherwise read every matching document's
        # JSON to feed the sorter, not just the k it keeps.
        ranked = [
            (int(rowid), float(score))
            for rowid, score in conn.execute(
                f"SELECT d.rowid, -{rank} FROM index_text "
                "JOIN index_docs d ON d.rowid = index_text.rowid "
                f"WHERE index_text MATCH ? AND d.workspace_id = ?{filters} "
                f"ORDER BY {rank}, d.rowid LIMIT ?",
                [match, workspace_id, *params, query.k],
            )
        ]
        docs = self._load(conn, workspace_id, {rowid for rowid, _ in ranked}, vectors=query.with_vectors)
        return [IndexHit(doc=docs[r], score=s) for r, s in ranked if r in docs]

    def _vector_hits(
        self, conn: apsw.Connection, workspace_id: str, query: IndexQuery, vector: list[float]
    ) -> list[IndexHit]:
        dim = len(vector)
        if not self._has_vec_table(conn, dim):
            return []
        filters, params = self._filters(query, "")
        visible, scope_params = scope_filter(query.scope)
        during, time_params = _time_filter(query, "")
        visible += during
        scope_params += time_params
        if visible:
            # vec0 cannot OR its metadata columns, but it applies a rowid IN (...) constraint
            # before ranking: the k nearest of the visible documents, not k filtered afterwards.
            filters += f" AND rowid IN (SELECT rowid FROM index_docs WHERE workspace_id = ?{visible})"
            params += [workspace_id, *scope_params]
        ranked = [
            (int(rowid), 1.0 - float(distance))
            for rowid, distance in conn.execute(
                f"SELECT rowid, distance FROM {_vec_table(dim)} "
                f"WHERE embedding MATCH ? AND k = ? AND workspace_id = ?{filters} ORDER BY distance",
                [_pack(vector), query.k, workspace_id, *params],
            )
            if distance is not None
        ]
        docs = self._load(conn, workspace_id, {rowid for rowid, _ in ranked}, vectors=query.with_vectors)
        return [IndexHit(doc=docs[r], score=s) for r, s in ranked if r in docs]

    def get_docs(self, workspace_id: str, record_ids: Sequence[str]) -> list[IndexDoc]:
        """The documents of these records (each record's own and its chunks'), with their vectors
        (ReadsDocs): what shared.memory.fact_keys rewrites with a record's facts."""
        out: list[IndexDoc] = []
        ids = list(dict.fromkeys(record_ids))
        with self._db.snapshot() as conn:
            for start in range(0, len(ids), 400):
                part = ids[start : start + 400]
                marks = ", ".join("?" for _ in part)
                for doc, blob in conn.execute(
                    f"SELECT doc, vector FROM index_docs WHERE workspace_id = ? "
                    f"AND (record_id IN ({marks}) OR id IN ({marks})) ORDER BY rowid",
                    [workspace_id, *part, *part],
                ):
                    out.append(_load_doc(str(doc), blob))
        return out

    def count(self, workspace_id: str) -> int:
        row = self._db.query_one("SELECT COUNT(*) FROM index_docs WHERE workspace_id = ?", (workspace_id,))
        return int(row[0]) if row else 0

    def missing_vectors(
        self, workspace_id: str, *, tier: MemoryTier = "message", limit: int = 50
    ) -> list[IndexDoc]:
        """Documents of `tier` stored without a vector, oldest written first (FindsMissingVectors):
        what maintenance re-embeds once the embedder answers again."""
        if limit < 1:
            return []
        rows = self._db.query(
            "SELECT doc FROM index_docs WHERE workspace_id = ? AND tier = ? AND dim IS NULL "
            "ORDER BY rowid LIMIT ?",
            (workspace_id, tier, limit),
        )
        return [_load_doc(str(row[0]), None) for row in rows]

    # ------------------------------------------------------------------ scopes

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, MemoryScope]) -> int:
        if not scopes:
            return 0
        nested = self._db.connection().in_transaction
        changed: list[CachedDoc] = []
        generation = 0
        with self._db.transaction() as conn:
            ids = list(scopes)
            for start in range(0, len(ids), 400):
                part = ids[start : start + 400]
                marks = ", ".join("?" for _ in part)
                rows = list(
                    conn.execute(
                        f"SELECT {_CACHED_COLUMNS}, d.doc, d.record_id FROM index_docs d "
                        "JOIN index_text t ON t.rowid = d.rowid "
                        f"WHERE d.workspace_id = ? AND (d.record_id IN ({marks}) OR d.id IN ({marks}))",
                        [workspace_id, *part, *part],
                    )
                )
                for row in rows:
                    doc_id, record_id = str(row[1]), str(row[-1])
                    scope = scopes.get(doc_id) or scopes[record_id]
                    parsed: IndexDoc = serde.loads(IndexDoc, str(row[-2]))
                    if parsed.scope == scope:
                        continue
                    conn.execute(
                        "UPDATE index_docs SET doc = ?, scoped = ?, scope_conversation = ?, "
                        "scope_users = ?, scope_shared = ? WHERE rowid = ?",
                        (
                            serde.dumps(parsed.model_copy(update={"scope": scope})),
                            *scope_columns(scope),
                            row[0],
                        ),
                    )
                    cached = _cached_doc(row[:-2])
                    cached.scope = scope
                    changed.append(cached)
            if changed:
                generation = self._bump(conn, workspace_id)
        if changed:
            self._after_write(workspace_id, generation, nested, [], changed)
        return len(changed)
