"""A file-backed embedding cache for the benchmarks, so a second run embeds nothing.

It implements the EmbeddingCache port (vectors by model id and SHA-256 of the text, no text kept)
on one SQLite file under .benchmarks/ (gitignored), for shared.memory.embeddings.cache.CachedEmbedder.
A file of its own rather than a data dir's cache: it outlives the temp dirs the benchmarks use, and
it has no TTL. The local MiniLM on a shared two-core machine embeds a few dozen texts a second:
without the cache every LoCoMo run would spend minutes re-embedding the same turns.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[1] / ".benchmarks" / "embeddings.sqlite"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class FileEmbeddingCache:
    def __init__(self, path: Path = DEFAULT_PATH) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = sqlite3.connect(str(path))
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS vectors (model TEXT, hash TEXT, vec BLOB, PRIMARY KEY (model, hash))"
        )

    def get_many(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            rows = self._conn.execute(
                f"SELECT hash, vec FROM vectors WHERE model = ? AND hash IN ({','.join('?' * len(part))})",
                [model_id, *part],
            )
            for h, blob in rows:
                found[h] = list(struct.unpack(f"<{len(blob) // 4}f", blob))
        return found

    def put_many(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                [(model_id, h, struct.pack(f"<{len(v)}f", *v)) for h, v in vectors.items()],
            )

    def close(self) -> None:
        self._conn.close()
