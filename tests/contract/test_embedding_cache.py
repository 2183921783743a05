"""EmbeddingCache contract: vectors by (model id, content hash), float32, 30-day expiry, on every
adapter set; and CachedEmbedder over each set's cache.

Expiry is tested with the adapter's clock set by the test (both adapters read `clock`), so no
test sleeps.
"""

from __future__ import annotations

import struct
from typing import Any

from shared.memory.embeddings.cache import CachedEmbedder, content_hash
from shared.ports import EmbeddingCache
from tests.support.hashing_embedder import HashingEmbedder

from .conftest import OpenBackend
from .factories import ContractBackend

T0 = 1_800_000_000.0
DAY = 86_400.0
MODEL = "test/model@1"


def _cache(contract: ContractBackend) -> EmbeddingCache:
    cache = contract.embedding_cache
    assert isinstance(cache, EmbeddingCache)
    return cache


def _f32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def test_put_then_get_returns_float32_vectors(contract: ContractBackend) -> None:
    cache = _cache(contract)
    a, b = content_hash("alpha"), content_hash("beta")
    va, vb = [0.1, -0.2, 0.3, 0.9], [1.0, 0.0, -0.5, 0.25]

    cache.put_many(MODEL, {a: va, b: vb})

    assert cache.get_many(MODEL, [a, b, content_hash("never stored")]) == {a: _f32(va), b: _f32(vb)}
    assert cache.get_many(MODEL, []) == {}
    # The same key twice in one call is one lookup.
    assert cache.get_many(MODEL, [a, a]) == {a: _f32(va)}


def test_entries_are_per_model(contract: ContractBackend) -> None:
    cache = _cache(contract)
    h = content_hash("same text")
    cache.put_many("test/model@1", {h: [1.0, 0.0]})
    cache.put_many("test/model@2", {h: [0.0, 1.0, 0.0]})

    assert cache.get_many("test/model@1", [h]) == {h: [1.0, 0.0]}
    assert cache.get_many("test/model@2", [h]) == {h: [0.0, 1.0, 0.0]}
    assert cache.get_many("test/model@3", [h]) == {}


def test_a_second_put_replaces_the_vector(contract: ContractBackend) -> None:
    cache = _cache(contract)
    h = content_hash("x")
    cache.put_many(MODEL, {h: [1.0, 0.0]})
    cache.put_many(MODEL, {h: [0.0, 1.0]})
    assert cache.get_many(MODEL, [h]) == {h: [0.0, 1.0]}


def test_many_entries_cross_batch_limits(contract: ContractBackend) -> None:
    cache = _cache(contract)
    # More than DynamoDB's 25 writes and 100 reads per batch call, and wide vectors.
    vectors = {content_hash(f"text {i}"): _f32([i / 1000.0] * 384) for i in range(230)}
    cache.put_many(MODEL, vectors)
    assert cache.get_many(MODEL, list(vectors)) == vectors


def test_entries_survive_a_restart(open_backend: OpenBackend) -> None:
    h = content_hash("durable")
    with open_backend() as first:
        _cache(first).put_many(MODEL, {h: [0.5, 0.5]})
    with open_backend() as second:
        assert _cache(second).get_many(MODEL, [h]) == {h: [0.5, 0.5]}


def test_entries_expire_after_30_days(contract: ContractBackend) -> None:
    cache: Any = _cache(contract)
    original = cache.clock
    try:
        cache.clock = lambda: T0
        old, new = content_hash("old"), content_hash("new")
        cache.put_many(MODEL, {old: [1.0]})
        cache.clock = lambda: T0 + 20 * DAY
        cache.put_many(MODEL, {new: [2.0]})

        cache.clock = lambda: T0 + 29 * DAY
        assert set(cache.get_many(MODEL, [old, new])) == {old, new}
        cache.clock = lambda: T0 + 31 * DAY
        assert set(cache.get_many(MODEL, [old, new])) == {new}
    finally:
        cache.clock = original


# ---------------------------------------------------------------- CachedEmbedder over each cache


def test_cached_embedder_embeds_each_distinct_text_once(contract: ContractBackend) -> None:
    model = HashingEmbedder(dimensions=16)
    embedder = CachedEmbedder(model, _cache(contract))
    assert (embedder.model_id, embedder.dimensions) == (model.model_id, 16)

    first = embedder.embed(["a cat", "a dog", "a cat"])
    assert model.calls == [2]  # the repeated text went to the model once
    assert first[0] == first[2]
    assert first == [_f32(v) for v in model.embed(["a cat", "a dog", "a cat"])]
    model.calls.clear()

    second = embedder.embed(["a dog", "a bird", "a cat"])
    assert model.calls == [1]  # only "a bird" was a miss
    assert second[0] == first[1]
    assert second[2] == first[0]

    model.calls.clear()
    assert embedder.embed(["a bird", "a cat"]) == [second[1], first[0]]
    assert model.calls == []  # all hits
    assert embedder.embed([]) == []


def test_cached_embedder_keeps_models_apart(contract: ContractBackend) -> None:
    cache = _cache(contract)
    small = CachedEmbedder(HashingEmbedder(dimensions=8, model_id="test/a"), cache)
    large = CachedEmbedder(HashingEmbedder(dimensions=12, model_id="test/b"), cache)
    assert len(small.embed(["same"])[0]) == 8
    assert len(large.embed(["same"])[0]) == 12
