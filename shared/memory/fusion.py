"""Fusion of BM25 and k-NN rankings: shared by every index adapter, so tuning holds everywhere.

Two methods: weighted min-max (spec 003: 0.7 vector + 0.3 text after normalising each list to
[0, 1], minimum fused score 0.3) and reciprocal rank fusion (k = 60). Documents found by both
lists are merged by id; the result is deduplicated by record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.models import IndexDoc, IndexHit, IndexResult

FusionMethod = Literal["minmax", "rrf"]


@dataclass(frozen=True)
class FusedHit:
    doc: IndexDoc
    score: float
    text_score: float | None
    vector_score: float | None


def _minmax(hits: list[IndexHit]) -> dict[str, float]:
    if not hits:
        return {}
    first: dict[str, float] = {}
    for h in hits:
        # A document listed twice keeps its first (best-ranked) score, as the raw scores do.
        first.setdefault(h.doc.id, h.score)
    lo, hi = min(first.values()), max(first.values())
    if hi == lo:
        # One hit, or all tied: each is as good as the best in its list.
        return dict.fromkeys(first, 1.0)
    return {doc_id: (score - lo) / (hi - lo) for doc_id, score in first.items()}


def fuse(
    result: IndexResult,
    *,
    method: FusionMethod = "minmax",
    text_weight: float = 0.3,
    vector_weight: float = 0.7,
    k: int = 10,
    min_score: float = 0.0,
    rrf_k: int = 60,
) -> list[FusedHit]:
    docs: dict[str, IndexDoc] = {}
    raw_text: dict[str, float] = {}
    raw_vec: dict[str, float] = {}
    for h in result.text_hits:
        docs.setdefault(h.doc.id, h.doc)
        raw_text.setdefault(h.doc.id, h.score)
    for h in result.vector_hits:
        docs.setdefault(h.doc.id, h.doc)
        raw_vec.setdefault(h.doc.id, h.score)

    scores: dict[str, float] = {}
    if method == "minmax":
        nt, nv = _minmax(result.text_hits), _minmax(result.vector_hits)
        # With only one list present, its normalised score stands alone rather than being capped
        # at that list's weight: a BM25-only fallback must still clear min_score.
        tw, vw = (text_weight, vector_weight) if nt and nv else (1.0, 1.0)
        for doc_id in docs:
            scores[doc_id] = tw * nt.get(doc_id, 0.0) + vw * nv.get(doc_id, 0.0)
    else:
        for ranking, weight in ((result.text_hits, text_weight), (result.vector_hits, vector_weight)):
            seen: set[str] = set()
            rank = 0
            for h in ranking:
                if h.doc.id in seen:
                    continue
                seen.add(h.doc.id)
                rank += 1
                scores[h.doc.id] = scores.get(h.doc.id, 0.0) + weight / (rrf_k + rank)

    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    return [
        FusedHit(doc=docs[doc_id], score=s, text_score=raw_text.get(doc_id), vector_score=raw_vec.get(doc_id))
        for doc_id, s in ordered
        if s >= min_score
    ][:k]
