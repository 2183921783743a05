"""EmbeddingCache on SQLite (sigil.db): vectors by (model id, content hash), float32 BLOBs.

Entries older than 30 days are evicted when the cache is opened (spec 003: "on service startup");
the created-at index makes that a range delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from shared.adapters.embedded.db import Database
from shared.memory.embeddings.cache import CACHE_TTL_DAYS, pack_vector, unpack_vector

_MIGRATIONS = [
    """
    CREATE TABLE embedding_cache (
        model_id TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (model_id, content_hash)
    ) WITHOUT ROWID;
    CREATE INDEX embedding_cache_created ON embedding_cache (created_at);
    """,
]

# SQLite's default limit on bound parameters is 32766; a chunk of 500 keys stays far below it.
_CHUNK = 500


class SqliteEmbeddingCache:
    def __init__(
        self,
        db: Database,
        *,
        ttl: timedelta = timedelta(days=CACHE_TTL_DAYS),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._ttl_s = ttl.total_seconds()
        self.clock = clock  # epoch seconds
        db.migrate("embedding_cache", _MIGRATIONS)
        self.evict_expired()

    def evict_expired(self) -> int:
        """Delete entries older than the TTL; returns how many went."""
        return self._db.execute(
            "DELETE FROM embedding_cache WHERE created_at < ?", (self.clock() - self._ttl_s,)
        )

    def get_many(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        unique = list(dict.fromkeys(hashes))
        # Entries past their TTL but not yet evicted (a long-running process) count as misses.
        oldest = self.clock() - self._ttl_s
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            rows = self._db.query(
                f"SELECT content_hash, vector FROM embedding_cache "
                f"WHERE model_id = ? AND content_hash IN ({marks}) AND created_at >= ?",
                (model_id, *chunk, oldest),
            )
            for content_hash, blob in rows:
                found[str(content_hash)] = unpack_vector(bytes(blob))
        return found

    def put_many(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None:
        if not vectors:
            return
        now = self.clock()
        rows = [(model_id, h, pack_vector(v), now) for h, v in vectors.items()]
        with self._db.transaction() as conn:
            conn.executemany(
                "INSERT INTO embedding_cache (model_id, content_hash, vector, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (model_id, content_hash) DO UPDATE SET "
                "vector = excluded.vector, created_at = excluded.created_at",
                rows,
            )
