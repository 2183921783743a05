"""Two query-time steps over a search's fused candidates, each switchable in MemorySearch.

Pseudo-relevance feedback (`feedback_weight` > 0): the first search's best few hits seed a second
search, as a person who found one half of an answer looks again with what it named. The second
query is the first's keywords plus the proper names the hits mention that the question did not
(`feedback_terms`: capitalised words not opening a sentence, "Sweden", "Vivaldi"), and the first's
vector moved towards the mean of the hits' own vectors (Rocchio, `feedback_vector`) when the index
can read them back (ReadsDocs). It runs as an ordinary IndexQuery through the MemoryIndex port
(same scope, tiers, session and time window), so both index adapters answer it alike; its fused
scores are added to the first's at `feedback_weight` (`add_second`).

Neighbour propagation (`neighbour_weight` > 0): a message gains that share of the best fused score
of the candidates said just before or after it in its session (`lend_to_neighbours`). An answer
often sits one turn from the words that match the question ("What did you paint?" / "A sunset").
Candidates only: no round trip.

bench/locomo.py measures both per conversation (docs/memory.md, "LoCoMo retrieval").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from shared.memory.doc_keys import RECORD_ID_KEY
from shared.memory.fusion import FusedHit

# The share of its best neighbour's score a message gains when neighbour propagation is on
# (MemorySearch's neighbour_weight, off by default). On LoCoMo's development split it gains on
# four of the five conversations added to the defaults (0.075 to 0.125), but on two alone and on
# none added to the other mechanisms, and costs multi-hop questions about 2 points: not kept
# (docs/memory.md, "LoCoMo retrieval").
NEIGHBOUR_WEIGHT = 0.1

# A capitalised word (letters only, at least three): a proper name when it does not open a sentence.
_CAPITALISED = re.compile(r"(?<![\w'\u2019])([A-Z][^\W\d_]{2,})")
# What precedes a word that opens a sentence (or the text): its start, or . ! ? : then spaces.
_OPENS = re.compile(r"(?:^|[.!?:\n\[\]\"\u201c]\s*)$")
# Calendar words are capitalised without naming anything the question is about.
_CALENDAR_TEXT = """january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday"""
_CALENDAR = frozenset(_CALENDAR_TEXT.split())


def feedback_terms(
    texts: Sequence[str], *, exclude: Iterable[str], limit: int, weights: Sequence[float] | None = None
) -> list[str]:
    """Up to `limit` proper names from `texts` (the first search's best hits, best first), the
    most weighted first: each occurrence counts its text's weight (default 1). Casefolded; none
    of `exclude` (stop words, the question's own words, the workspace's people) and no calendar
    words."""
    if limit <= 0:
        return []
    skip = {w.casefold() for w in exclude} | _CALENDAR
    counts: dict[str, float] = {}
    for i, text in enumerate(texts):
        weight = weights[i] if weights is not None and i < len(weights) else 1.0
        for m in _CAPITALISED.finditer(text):
            if _OPENS.search(text[: m.start()]):
                continue
            word = m.group(1).casefold()
            if word not in skip:
                counts[word] = counts.get(word, 0.0) + weight
    # Stable: ties keep the order the words were first seen in (best hit first).
    return [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])][:limit]


def feedback_vector(query: Sequence[float], hits: Sequence[Sequence[float]], beta: float) -> list[float]:
    """Rocchio: the unit query vector plus `beta` times the mean of the unit hit vectors (those of
    the query's width); the query itself when there are none."""
    q = _unit(query)
    rows = [_unit(v) for v in hits if len(v) == len(q)]
    rows = [r for r in rows if any(r)]
    if not rows or not any(q):
        return list(query)
    return [qi + beta * sum(r[i] for r in rows) / len(rows) for i, qi in enumerate(q)]


def _unit(v: Sequence[float]) -> list[float]:
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v] if norm > 0 else [0.0 for _ in v]


def add_second(first: list[FusedHit], second: list[FusedHit], weight: float) -> list[FusedHit]:
    """`first` re-ranked with each document's score in `second` added at `weight`, scaled so that
    the second's best adds `weight` x the first's best; documents only the second found join."""
    if not second or weight <= 0:
        return first
    best_first = first[0].score if first else 1.0
    best_second = second[0].score or 1.0
    scale = weight * (best_first or 1.0) / best_second
    extra = {f.doc.id: f.score * scale for f in second}
    out = [replace(f, score=f.score + extra.pop(f.doc.id, 0.0)) for f in first]
    out += [replace(f, score=f.score * scale) for f in second if f.doc.id in extra]
    return sorted(out, key=lambda f: -f.score)


def lend_to_neighbours(fused: list[FusedHit], weight: float, *, reach: int = 1) -> list[FusedHit]:
    """`fused` re-ranked with each message gaining `weight` x the best score of the candidates
    within `reach` turns of it in its session (metadata "seq"; a record's chunks count as it)."""
    if weight <= 0 or reach < 1:
        return fused
    best: dict[tuple[str, int], float] = {}
    for f in fused:
        at = _position(f)
        if at is not None:
            best[at] = max(best.get(at, 0.0), f.score)
    if not best:
        return fused
    out: list[FusedHit] = []
    for f in fused:
        at = _position(f)
        if at is None:
            out.append(f)
            continue
        session, seq = at
        near = max((best.get((session, seq + d), 0.0) for d in range(-reach, reach + 1) if d), default=0.0)
        out.append(replace(f, score=f.score + weight * near) if near > 0 else f)
    # Stable: ties keep the fused order.
    return sorted(out, key=lambda f: -f.score)


def _position(f: FusedHit) -> tuple[str, int] | None:
    seq = f.doc.metadata.get("seq", "")
    if f.doc.tier != "message" or f.doc.session_id is None or not seq.isdigit():
        return None
    return f.doc.session_id, int(seq)


def record_of(f: FusedHit) -> str:
    return f.doc.metadata.get(RECORD_ID_KEY, f.doc.id)
