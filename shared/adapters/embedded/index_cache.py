"""In-memory BM25 and k-NN over one workspace's index documents, for SqliteMemoryIndex.

Why: at 100,000 documents in one workspace, FTS5 ranks every document matching any query word
(an OR query of common words matches tens of thousands, ~100 ms) and sqlite-vec compares the
query with every vector in C without SIMD BLAS (~50 ms). Here a workspace's documents are held as
numpy arrays: an inverted index whose postings are scored for the query's words only, and a
float32 matrix of unit vectors that one BLAS matrix-vector product ranks (past 20,000 vectors,
after a sign-bit prefilter: see PREFILTER_MIN_ROWS). Both take a few milliseconds at 100k.

SQLite stays the source of truth; a `Shard` is a cache of it, tagged with the workspace's
generation (bumped by every write transaction, in the same transaction). A search uses a shard
only when its generation is the stored one, and otherwise rebuilds it from the tables (once; a
100k workspace takes a few seconds). Writes made through this process update the shard in place,
so the gateway's own turns never cause a rebuild; writes by another process cause one.

BM25 is FTS5's own formula (k1 = 1.2, b = 0.75; a document's text and its context form one
weighted frequency, context weighted `context_weight`; IDF log((N - n + 0.5) / (n + 0.5)),
floored at 1e-6), over the same tokens (FTS5's porter tokenizer), except that N, n and the
average length are the workspace's own rather than the whole file's: another workspace's words
never move this one's ranking.

Scopes: each document's conversation, users and shared flag are held beside its tier and session,
and a search's RecallScope becomes a boolean mask (shared.memory.scope.visible, vectorised) taken
before the top k, as the SQL paths filter in their WHERE: k hits come back even when most of the
workspace is out of scope. BM25's statistics stay the workspace's, as FTS5's are the file's.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.models import MemoryScope, RecallScope

if TYPE_CHECKING:
    import numpy.typing as npt

K1 = 1.2
B = 0.75
# k-NN is exact up to this many vectors in a workspace (all of LoCoMo, most real workspaces).
# Past it, a sign-bit prefilter shortlists max(4096, 32 k) candidates for the exact cosine: on
# 10k real all-MiniLM-L6-v2 vectors, a 4% shortlist keeps recall@10 at 1.000 and @80 at 0.98
# (bench/memory_scale.py --prefilter-recall).
PREFILTER_MIN_ROWS = 20_000
PREFILTER_MIN_CANDIDATES = 4096
PREFILTER_FACTOR = 32
_MIN_IDF = 1e-6
TIERS = ("message", "summary", "fact")
# created_us of a document that has none: no time window admits it.
_NO_TIME = np.iinfo(np.int64).min
# A window on when documents were said: microseconds since the epoch, from inclusive and before
# exclusive, either None for open.
Window = tuple[int | None, int | None]


class _Grow:
    """A 1-d numpy array that appends in amortised O(1)."""

    def __init__(self, dtype: Any, capacity: int = 1024) -> None:
        self.data: npt.NDArray[Any] = np.zeros(capacity, dtype=dtype)
        self.n = 0

    def append(self, value: Any) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.n] = value
        self.n += 1

    def view(self) -> npt.NDArray[Any]:
        return self.data[: self.n]


class _GrowMatrix:
    def __init__(self, dim: int, capacity: int = 1024, dtype: Any = np.float32) -> None:
        self.data: npt.NDArray[Any] = np.zeros((capacity, dim), dtype=dtype)
        self.n = 0

    def append(self, row: npt.NDArray[Any]) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.n] = row
        self.n += 1

    def view(self) -> npt.NDArray[Any]:
        return self.data[: self.n]


class _GrowColumns:
    """A (width x n) matrix stored column by column, appended one column at a time: a scan of one
    row (one 64-bit word of every vector) reads contiguous memory."""

    def __init__(self, width: int, dtype: Any, capacity: int = 1024) -> None:
        self.data: npt.NDArray[Any] = np.zeros((width, capacity), dtype=dtype)
        self.n = 0

    def append(self, column: npt.NDArray[Any]) -> None:
        if self.n == self.data.shape[1]:
            self.data = np.concatenate([self.data, np.zeros_like(self.data)], axis=1)
        self.data[:, self.n] = column
        self.n += 1

    def view(self) -> npt.NDArray[Any]:
        return self.data[:, : self.n]


@dataclass
class _Vectors:
    positions: _Grow = field(default_factory=lambda: _Grow(np.int64))
    matrix: _GrowMatrix | None = None
    # Sign bits of each vector, packed into uint64 words: the prefilter of a large workspace.
    bits: _GrowColumns | None = None


def sign_bits(v: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    packed = np.packbits(v > 0)
    padded = np.zeros(-(-len(packed) // 8) * 8, dtype=np.uint8)
    padded[: len(packed)] = packed
    return padded.view(np.uint64)


@dataclass
class CachedDoc:
    """What a shard needs of one document."""

    rowid: int
    doc_id: str
    tier: str
    session_id: str
    text: str
    context: str
    vector: Sequence[float] | None  # usable (finite, non-zero) or None
    scope: MemoryScope | None = None  # None: written before scopes existed
    created_us: int | None = None  # when it was said (IndexDoc.created_at); None: unknown
    facts: str = ""  # the facts extracted from it (fact-augmented keys), weighted `facts_weight`


class Shard:
    """One workspace's documents: positions are append-only; a replaced or deleted document's
    position is marked dead and skipped until the shard is rebuilt."""

    def __init__(
        self,
        generation: int,
        tokenize: Any,
        context_weight: float,
        *,
        prefilter_min_rows: int = PREFILTER_MIN_ROWS,
        facts_weight: float = 0.0,
    ) -> None:
        self.generation = generation
        self._facts_weight = facts_weight
        self._prefilter_min_rows = prefilter_min_rows
        self._tokenize = tokenize
        self._context_weight = context_weight
        self.positions: dict[str, int] = {}  # doc id -> live position
        self.rowid = _Grow(np.int64)
        self.alive = _Grow(np.bool_)
        self.tier = _Grow(np.int8)
        self.session = _Grow(np.int32)
        self.length = _Grow(np.float32)
        self.sessions: dict[str, int] = {}
        self.conversation = _Grow(np.int32)  # code in self.conversations; -1: none
        self.conversations: dict[str, int] = {}
        self.shared = _Grow(np.bool_)
        self.created = _Grow(np.int64)  # created_us; _NO_TIME: unknown
        # user -> positions of the documents naming them (dead positions included: masked by alive).
        self.users: dict[str, array[int]] = {}
        # term -> (positions int32, weighted frequency float32), appended as documents arrive.
        self.postings: dict[str, tuple[array[int], array[float]]] = {}
        self.vectors: dict[int, _Vectors] = {}
        self.live = 0
        self.dead = 0
        self.total_length = 0.0
        self.last_used = 0.0

    @property
    def size(self) -> int:
        return self.rowid.n

    # ------------------------------------------------------------------ writes

    def add(self, doc: CachedDoc) -> None:
        self.remove(doc.doc_id)
        pos = self.rowid.n
        text_terms = self._tokenize(doc.text)
        context_terms = self._tokenize(doc.context) if doc.context else []
        freq: dict[str, float] = {}
        for t in text_terms:
            freq[t] = freq.get(t, 0.0) + 1.0
        for t in context_terms:
            freq[t] = freq.get(t, 0.0) + self._context_weight
        facts_terms = self._tokenize(doc.facts) if doc.facts else []
        for t in facts_terms:
            freq[t] = freq.get(t, 0.0) + self._facts_weight
        for term, f in freq.items():
            entry = self.postings.get(term)
            if entry is None:
                entry = self.postings[term] = (array("i"), array("f"))
            entry[0].append(pos)
            entry[1].append(f)
        length = float(len(text_terms) + len(context_terms) + len(facts_terms))
        self.rowid.append(doc.rowid)
        self.alive.append(True)
        self.tier.append(TIERS.index(doc.tier) if doc.tier in TIERS else -1)
        self.session.append(self.sessions.setdefault(doc.session_id, len(self.sessions)))
        self.length.append(length)
        scope = doc.scope
        if scope is not None and scope.conversation is not None:
            self.conversation.append(
                self.conversations.setdefault(scope.conversation, len(self.conversations))
            )
        else:
            self.conversation.append(-1)
        self.shared.append(scope is not None and scope.shared)
        self.created.append(_NO_TIME if doc.created_us is None else doc.created_us)
        for user in scope.users if scope is not None else ():
            self.users.setdefault(user, array("i")).append(pos)
        if doc.vector is not None:
            v = np.asarray(doc.vector, dtype=np.float32)
            v /= np.float32(np.linalg.norm(v))
            vecs = self.vectors.setdefault(len(v), _Vectors())
            bits = sign_bits(v)
            if vecs.matrix is None or vecs.bits is None:
                vecs.matrix = _GrowMatrix(len(v))
                vecs.bits = _GrowColumns(len(bits), np.uint64)
            vecs.positions.append(pos)
            vecs.matrix.append(v)
            vecs.bits.append(bits)
        self.positions[doc.doc_id] = pos
        self.live += 1
        self.total_length += length

    def remove(self, doc_id: str) -> None:
        pos = self.positions.pop(doc_id, None)
        if pos is None:
            return
        self.alive.data[pos] = False
        self.live -= 1
        self.dead += 1
        self.total_length -= float(self.length.data[pos])

    # ------------------------------------------------------------------ reads

    def _filter(
        self,
        tiers: Sequence[str] | None,
        session_id: str | None,
        scope: RecallScope | None = None,
        window: Window | None = None,
    ) -> npt.NDArray[np.bool_] | None:
        """Positions a search may return; None: all of them (no filter, nothing dead)."""
        if scope is not None and scope.workspace_wide:
            scope = None
        if tiers is None and session_id is None and scope is None and window is None and self.dead == 0:
            return None
        mask = self.alive.view().copy()
        if tiers is not None:
            codes = [TIERS.index(t) for t in tiers if t in TIERS]
            mask &= np.isin(self.tier.view(), codes)
        if session_id is not None:
            code = self.sessions.get(session_id)
            if code is None:
                mask[:] = False
            else:
                mask &= self.session.view() == code
        if scope is not None:
            mask &= self._visible(scope)
        if window is not None:
            created = self.created.view()
            mask &= created != _NO_TIME
            if window[0] is not None:
                mask &= created >= window[0]
            if window[1] is not None:
                mask &= created < window[1]
        return mask

    def _visible(self, scope: RecallScope) -> npt.NDArray[np.bool_]:
        """shared.memory.scope.visible over every position: any clause of the scope admits."""
        seen = np.zeros(self.size, dtype=np.bool_)
        if scope.session_id is not None and (code := self.sessions.get(scope.session_id)) is not None:
            seen |= self.session.view() == code
        if (
            scope.conversation is not None
            and (code := self.conversations.get(scope.conversation)) is not None
        ):
            seen |= self.conversation.view() == code
        for user in scope.users:
            positions = self.users.get(user)
            if positions:
                at = np.frombuffer(positions, dtype=np.int32)
                seen[at] = True
                del at  # a view of the array: released before anything appends to it
        if scope.shared:
            seen |= self.shared.view()
        return seen

    def text_search(
        self,
        terms: Iterable[str],
        k: int,
        tiers: Sequence[str] | None,
        session_id: str | None,
        scope: RecallScope | None = None,
        *,
        window: Window | None = None,
    ) -> list[tuple[int, float]]:
        """(rowid, bm25) of the k best documents matching any of `terms`, best first."""
        n_docs = self.live
        if n_docs == 0:
            return []
        alive = self.alive.view()
        length = self.length.view()
        avgdl = self.total_length / n_docs if self.total_length > 0 else 1.0
        scores = np.zeros(self.size, dtype=np.float64)
        matched = np.zeros(self.size, dtype=np.bool_)
        for term in dict.fromkeys(terms):
            entry = self.postings.get(term)
            if entry is None:
                continue
            pos = np.frombuffer(entry[0], dtype=np.int32)
            freq = np.frombuffer(entry[1], dtype=np.float32).astype(np.float64)
            live = alive[pos]
            hits = int(np.count_nonzero(live))
            if hits == 0:
                continue
            idf = math.log((n_docs - hits + 0.5) / (hits + 0.5))
            if idf <= 0.0:
                idf = _MIN_IDF
            part = idf * (freq * (K1 + 1.0)) / (freq + K1 * (1.0 - B + B * length[pos] / avgdl))
            # A term's postings name each position once, so fancy-index addition is exact.
            scores[pos] += part * live
            matched[pos] |= live
            del pos, freq  # views of the arrays: released before anything appends to them
        allowed = self._filter(tiers, session_id, scope, window)
        candidates = np.flatnonzero(matched if allowed is None else matched & allowed)
        return self._top(candidates, scores[candidates], k)

    def vector_search(
        self,
        vector: Sequence[float],
        k: int,
        tiers: Sequence[str] | None,
        session_id: str | None,
        scope: RecallScope | None = None,
        *,
        window: Window | None = None,
    ) -> list[tuple[int, float]]:
        """(rowid, cosine similarity) of the k nearest documents with a vector of this width."""
        vecs = self.vectors.get(len(vector))
        if vecs is None or vecs.matrix is None or vecs.positions.n == 0:
            return []
        q = np.asarray(vector, dtype=np.float32)
        q /= np.float32(np.linalg.norm(q))
        positions = vecs.positions.view()
        allowed = self._filter(tiers, session_id, scope, window)
        keep = None if allowed is None else allowed[positions]
        if keep is not None and not keep.any():
            return []
        rows: npt.NDArray[Any] | None = None if keep is None or keep.all() else np.flatnonzero(keep)
        n = len(positions) if rows is None else len(rows)
        shortlist = max(PREFILTER_MIN_CANDIDATES, PREFILTER_FACTOR * k)
        if n > self._prefilter_min_rows and n > shortlist and vecs.bits is not None:
            # Sign-bit prefilter: Hamming distance to the query's signs over 48 bytes a vector,
            # not 1.5 KB, then the exact cosine over the shortlist. A full float scan of 100k
            # vectors reads 150 MB per query; memory bandwidth, not arithmetic, is its cost.
            words = vecs.bits.view() if rows is None else vecs.bits.view()[:, rows]
            query_bits = sign_bits(q)
            distance = np.bitwise_count(words[0] ^ query_bits[0]).astype(np.uint16)
            for w in range(1, len(query_bits)):  # word by word: contiguous, no (n x words) temporary
                distance += np.bitwise_count(words[w] ^ query_bits[w])
            picked = np.argpartition(distance, shortlist)[:shortlist]
            rows = picked if rows is None else rows[picked]
        if rows is None:
            sims = vecs.matrix.view() @ q
            candidates = positions
        else:
            sims = vecs.matrix.view()[rows] @ q
            candidates = positions[rows]
        return self._top(candidates, sims.astype(np.float64), k)

    def _top(
        self, positions: npt.NDArray[Any], scores: npt.NDArray[np.float64], k: int
    ) -> list[tuple[int, float]]:
        if len(positions) == 0:
            return []
        if len(positions) > k:
            # The k-th best score, then everything at least as good (ties kept for the rowid order).
            kth = np.partition(-scores, k - 1)[k - 1]
            keep = np.flatnonzero(-scores <= kth)
            positions, scores = positions[keep], scores[keep]
        rowids = self.rowid.view()[positions]
        order = np.lexsort((rowids, -scores))[:k]
        return [(int(rowids[i]), float(scores[i])) for i in order]
