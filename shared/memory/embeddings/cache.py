"""The embedding cache in front of a model: each distinct text is embedded once per model.

Keys are (model id, SHA-256 of the exact text), so the cache holds no text and is shared by every
workspace; a changed model id (new weights, other dimensions) simply misses. Vectors are stored as
float32, and a miss is returned rounded the same way, so a text's vector does not depend on
whether it came from the model or the cache.
"""

from __future__ import annotations

import hashlib
import logging
import math
import struct
import threading
from collections.abc import Mapping, Sequence

from cachetools import LRUCache

from shared.errors import EmbeddingError
from shared.ports import Embedder, EmbeddingCache

logger = logging.getLogger(__name__)

# Entries older than this are evicted (spec 003: on start, SQLite; a TTL attribute, DynamoDB).
CACHE_TTL_DAYS = 30


def content_hash(text: str) -> str:
    """The cache key of a text: SHA-256 of its exact UTF-8 bytes, in hex."""
    # surrogatepass: a lone surrogate (possible in text decoded from JSON) must hash, not raise.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def pack_vector(vector: Sequence[float]) -> bytes:
    """Little-endian float32, the stored form in both adapters (4 bytes a dimension)."""
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack_vector(blob: bytes) -> list[float]:
    if len(blob) % 4:
        raise ValueError(f"a packed vector has a multiple of 4 bytes, not {len(blob)}")
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def float32(vector: Sequence[float]) -> list[float]:
    return unpack_vector(pack_vector(vector))


class InProcessEmbeddingCache:
    """An EmbeddingCache in this process's memory, least recently used out first.

    The cloud turn's cache: a warm turn embeds the messages after its roll-out, which roll out on
    a later turn and are found here, and it makes no DynamoDB call for them (the warm turn's
    budget is 3). The consolidate function, which embeds in bulk, uses the DynamoDB cache.
    """

    def __init__(self, *, max_entries: int = 8192) -> None:
        self._lock = threading.Lock()
        self._vectors: LRUCache[tuple[str, str], list[float]] = LRUCache(max_entries)

    def get_many(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        with self._lock:
            for h in hashes:
                vector = self._vectors.get((model_id, h))
                if vector is not None:
                    found[h] = list(vector)
        return found

    def put_many(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None:
        with self._lock:
            for h, vector in vectors.items():
                self._vectors[(model_id, h)] = [float(x) for x in vector]


class CachedEmbedder:
    """An Embedder that asks `cache` first and `inner` only for the misses.

    A failing cache never fails an embedding: a read error counts as all misses and a write error
    is only logged, since the cache saves work but holds nothing that cannot be recomputed.
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        # Every embedder fixes its id and width when built (the local one without loading).
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        for text in texts:
            if not isinstance(text, str):
                raise EmbeddingError(f"can only embed str, got {type(text).__name__}")
        model_id = self.model_id
        hashes = [content_hash(t) for t in texts]
        # First text for each distinct hash, in input order: a repeated text is embedded once.
        first_text = dict(zip(hashes, texts, strict=True))
        found = self._get(model_id, list(first_text))
        vectors: dict[str, list[float]] = {
            h: v for h, v in found.items() if h in first_text and self._usable(v)
        }
        misses = [h for h in first_text if h not in vectors]
        if misses:
            fresh = self.inner.embed([first_text[h] for h in misses])
            if len(fresh) != len(misses):
                raise EmbeddingError(f"{model_id} returned {len(fresh)} vectors for {len(misses)} texts")
            computed = {h: float32(v) for h, v in zip(misses, fresh, strict=True)}
            self._put(model_id, computed)
            vectors.update(computed)
        return [list(vectors[h]) for h in hashes]

    def _usable(self, vector: Sequence[float]) -> bool:
        # A vector of another width under the same id (a bug, or a hand-edited id) is recomputed.
        return len(vector) == self.inner.dimensions and all(math.isfinite(x) for x in vector)

    def _get(self, model_id: str, hashes: list[str]) -> dict[str, list[float]]:
        try:
            return self.cache.get_many(model_id, hashes)
        except Exception:
            logger.warning("embedding cache read failed; embedding without it", exc_info=True)
            return {}

    def _put(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None:
        try:
            self.cache.put_many(model_id, vectors)
        except Exception:
            logger.warning("embedding cache write failed; vectors not cached", exc_info=True)
