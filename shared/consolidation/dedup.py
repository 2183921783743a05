"""Near-duplicate pairs among unit vectors, without comparing every pair (spec 001: cosine > 0.95).

Random-hyperplane LSH (Charikar): each vector gets `bands` signatures of `bits` sign bits, one per
random hyperplane. Two vectors at angle θ agree on a bit with probability 1 - θ/π, so they share a
band's signature with probability (1 - θ/π)^bits, and they become a *candidate* when they share
any band. Only candidates are compared (one dot product each, vectorised); the cosine of each is
checked against the threshold exactly, so LSH can miss a pair but never invents one.

With the defaults (20 bits, 48 bands) a pair at cosine 0.95 (θ = 18.2°) is a candidate with
probability 1 - (1 - 0.899^20)^48 ≈ 0.998, and more similar pairs more surely still; an unrelated
pair (cosine ~0) shares a band with probability about 48 / 2^20 ≈ 0.005 %. The number of
comparisons grows with the number of similar pairs, not with n²/2; `DedupStats.comparisons` reports it.

Deterministic: the hyperplanes come from a fixed seed, so a retried run finds the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DEFAULT_BITS = 20
DEFAULT_BANDS = 48
_SEED = 0x5161_1001
# A band bucket holding more vectors than this is compared in slices of this size: a pathological
# bucket (thousands of near-identical vectors) must not turn into one quadratic block. Pairs across
# slices are still found through the other bands.
_MAX_BUCKET = 2048
# Buckets up to this size are expanded into pairs in one vectorised step per size.
_SMALL_BUCKET = 64
# Candidate pairs checked per vectorised step (bounds the temporary arrays).
_PAIR_CHUNK = 65_536

FloatMatrix = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class DedupStats:
    n: int
    comparisons: int  # distinct candidate pairs whose cosine was computed
    pairs: int  # pairs above the threshold

    @property
    def all_pairs(self) -> int:
        return self.n * (self.n - 1) // 2


def normalise(vectors: FloatMatrix) -> FloatMatrix:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: FloatMatrix = vectors / norms
    return unit


def _signatures(x: FloatMatrix, bits: int, bands: int) -> IntArray:
    """(n, bands) integer band signatures."""
    rng = np.random.default_rng(_SEED + x.shape[1])
    planes = rng.standard_normal((x.shape[1], bits * bands)).astype(np.float32)
    # Single precision is plenty for a sign, and halves the one real matrix product here.
    signs = (x.astype(np.float32) @ planes > 0).reshape(x.shape[0], bands, bits)
    packed = np.packbits(signs, axis=2, bitorder="little")  # (n, bands, ceil(bits / 8)) bytes
    keys = np.zeros((x.shape[0], bands), dtype=np.int64)
    for byte in range(packed.shape[2]):
        keys |= packed[:, :, byte].astype(np.int64) << (8 * byte)
    return keys


def _band_candidates(keys: IntArray) -> IntArray:
    """Candidate pairs (as i * n + j, i < j) of vectors sharing a key in one band."""
    n = keys.shape[0]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, n])
    found: list[IntArray] = []
    # Buckets of one size are expanded into their pairs together, one vectorised step per size:
    # almost every bucket holds two or three vectors, and a loop per bucket would dominate.
    for size in np.unique(sizes[sizes > 1]).tolist():
        bucket_starts = starts[sizes == size]
        if size > _SMALL_BUCKET:
            for start in bucket_starts.tolist():
                members = order[start : start + size]
                for lo in range(0, size, _MAX_BUCKET):
                    found.append(_pairs_of(members[lo : lo + _MAX_BUCKET][None, :], n))
            continue
        found.append(_pairs_of(order[bucket_starts[:, None] + np.arange(size)], n))
    if not found:
        return np.empty(0, dtype=np.int64)
    return np.concatenate(found).astype(np.int64)


def _pairs_of(buckets: IntArray, n: int) -> IntArray:
    """Every pair within each row of `buckets` (k buckets of m members), encoded i * n + j, i < j."""
    i, j = np.triu_indices(buckets.shape[1], k=1)
    a, b = buckets[:, i], buckets[:, j]
    return (np.minimum(a, b) * n + np.maximum(a, b)).ravel()


def near_duplicate_pairs(
    vectors: FloatMatrix,
    threshold: float,
    *,
    bits: int = DEFAULT_BITS,
    bands: int = DEFAULT_BANDS,
) -> tuple[list[tuple[int, int, float]], DedupStats]:
    """Pairs (i, j, cosine) with i < j and cosine > threshold among the rows of `vectors`.

    Rows are normalised here, so any non-zero vectors will do.
    """
    n = int(vectors.shape[0])
    if n < 2:
        return [], DedupStats(n=n, comparisons=0, pairs=0)
    x = normalise(np.asarray(vectors, dtype=np.float64))
    keys = _signatures(x, bits, bands)
    per_band = [_band_candidates(keys[:, band]) for band in range(bands)]
    candidates = np.unique(np.concatenate(per_band)) if per_band else np.empty(0, dtype=np.int64)
    pairs: list[tuple[int, int, float]] = []
    # Gathering the rows of every candidate dominates the time: it is done in single precision
    # with a margin, and only the pairs that pass are checked again exactly.
    x32 = x.astype(np.float32)
    for lo in range(0, candidates.size, _PAIR_CHUNK):
        chunk = candidates[lo : lo + _PAIR_CHUNK]
        i, j = chunk // n, chunk % n
        rough = np.einsum("ij,ij->i", x32[i], x32[j])
        near = rough > threshold - 1e-4
        i, j = i[near], j[near]
        cos = np.einsum("ij,ij->i", x[i], x[j])
        hit = cos > threshold
        pairs += zip(i[hit].tolist(), j[hit].tolist(), cos[hit].tolist(), strict=True)
    return pairs, DedupStats(n=n, comparisons=int(candidates.size), pairs=len(pairs))


def brute_force_pairs(vectors: FloatMatrix, threshold: float, *, block: int = 2048) -> set[tuple[int, int]]:
    """Every pair above the threshold by blocked matrix products: the reference LSH is measured
    against (quadratic; for tests and the benchmark only)."""
    x = normalise(np.asarray(vectors, dtype=np.float64))
    n = x.shape[0]
    found: set[tuple[int, int]] = set()
    for lo in range(0, n, block):
        sims = x[lo : lo + block] @ x.T
        rows, cols = np.nonzero(sims > threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            if lo + r < c:
                found.add((lo + r, c))
    return found
