"""Memory search: the hybrid BM25 + k-NN search the memory tools and the benchmark go through.

One index round trip asks for both rankings (each over-fetched), the shared fusion code merges
them, and documents are folded into the memory record they came from (a long record is indexed as
several chunk documents, each naming its record in metadata "record_id").

When a part fails the search degrades instead of failing, and says so in the outcome:
hybrid -> BM25 only (no embedder, or the embedder raised) -> the session's recent messages from
the MemoryStore (the index raised). Each step down counts SearchFallbackBm25 or
SearchFallbackRecent (shared.metric_catalogue) in the functions that publish metrics.

Every search names the RecallScope it may reach (built by the turn, shared.memory.scope), and the
index applies it inside its query. The recent-messages stand-in reads one session, and only one
the scope includes (the reader's own session is in every scope).
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.errors import BadRequest
from shared.memory.doc_keys import AUTHOR_KEY, MAX_AUTHOR_CHARS, RECORD_ID_KEY
from shared.memory.expand import expand_summaries
from shared.memory.fusion import FusedHit, FusionMethod, fuse
from shared.memory.scope import visible
from shared.memory.second_step import (
    add_second,
    feedback_terms,
    feedback_vector,
    lend_to_neighbours,
    record_of,
)
from shared.memory.when import TimeFilter, timed_search
from shared.metric_catalogue import SEARCH_FALLBACK_BM25, SEARCH_FALLBACK_RECENT, record
from shared.models import IndexQuery, IndexResult, MemoryTier, RecallScope
from shared.ports import Embedder, MemoryIndex, MemoryStore, ReadsDocs

logger = logging.getLogger(__name__)

SearchMode = Literal["hybrid", "bm25", "vector", "recent"]

MAX_QUERY_BYTES = 100 * 1024
# IndexQuery.k is capped at 1000: the over-fetch never asks for more.
_MAX_FETCH = 1000
# Control characters other than tab and newline (and carriage return, which pasted text carries).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORD = re.compile(r"[^\W_]+")
_POSSESSIVE_WORD = re.compile(r"([^\W_]+)(?:['\u2019]s\b)?")

# Function words dropped from the BM25 half of a query ("when did she go to the gym?" -> "go gym").
# BM25's IDF already makes them cheap, but not free: with a document's context indexed too, a
# question's "what did you" matches nearly everything a little and pushes real matches down.
# The vector half always sees the whole query. OpenSearch's english analyser drops its own list
# on top; the embedded index has none, so this list is what makes the two behave alike.
_STOP_WORDS_TEXT = """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

# Fused scores below these are dropped. Nothing by default: min-max normalises each list's
# weakest candidate to 0 whatever its relevance, so a threshold is relative, not a relevance bar;
# spec 003's 0.3 cost LoCoMo recall@10 0.1 point and R@20 more, and the tools bound hits by k.
# RRF's scores (~1/60) have no such scale either. Callers that want fewer, surer hits pass one.
DEFAULT_MIN_SCORE: dict[FusionMethod, float] = {"minmax": 0.0, "rrf": 0.0}

# A document whose author the query names gains this share of the best fused score. Why: a
# question about a person is mostly answered by their own words ("what did Alice paint?" by
# Alice's "I painted a sunset"), but a name every one of their messages carries in its author
# gives BM25 nothing to go on (an IDF near zero in a two-person conversation), and in the
# query's embedding a name pulls towards every message that mentions the person, so the names of
# the workspace's people are left out of it (`people`). On LoCoMo 96% of the evidence of a
# question naming one speaker is that speaker's own turns; the two together take recall@10 from
# 79.0 to 82.3 (docs/memory.md).
AUTHOR_BOOST = 0.25

# Metadata key of a document's context: the text around it (for a message, its neighbours in the
# session) that BM25 matches at a lower weight than the document's own words. Written by
# shared.memory.writer, indexed by the adapters, never shown in a hit.
CONTEXT_KEY = "context"
# Metadata keys of a message document's fact-augmented keys (shared.memory.fact_keys): the text
# of the facts extracted from it, one a line, which BM25 matches as a field of its own, and the
# ids of those facts (space-separated), by which they are replaced or taken off. Never shown.
FACTS_KEY = "facts"
FACT_IDS_KEY = "fact_ids"
_NOT_SHOWN = frozenset({CONTEXT_KEY, FACTS_KEY, FACT_IDS_KEY})


class MemoryHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # the memory record id (chunk documents folded into their record)
    tier: MemoryTier
    text: str
    score: float
    session_id: str | None
    created_at: datetime
    metadata: dict[str, str]
    # The document's raw BM25 and vector scores before fusion (None: that half did not find it,
    # or did not run), for the console to show how `score` came about.
    bm25: float | None = None
    vector: float | None = None


class SearchOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    hits: list[MemoryHit]
    # What actually answered: "hybrid", "bm25" (no embedder or it failed), "vector", or "recent"
    # (the index failed and the session's newest messages stood in).
    mode: SearchMode
    degraded: str | None = None
    # The time the query named and how it was applied (shared.memory.when); None: it named none,
    # or the search was not given the asking turn's time.
    time: TimeFilter | None = None


def keyword_query(text: str) -> str:
    """The words of `text` that BM25 should match: the query minus stop words, or the whole query
    when it is nothing but stop words (so "who are you" still finds something)."""
    words = _WORD.findall(text)
    kept = [w for w in words if w.casefold() not in STOP_WORDS]
    return " ".join(kept or words)


def validate_query(query: str) -> str:
    """The query as searched, or BadRequest saying what is wrong with it."""
    if not isinstance(query, str):
        raise BadRequest("the search query must be a string")
    if len(query.encode("utf-8", errors="surrogatepass")) > MAX_QUERY_BYTES:
        raise BadRequest(f"the search query is longer than {MAX_QUERY_BYTES // 1024} KB")
    if _CONTROL.search(query):
        raise BadRequest("the search query contains control characters")
    stripped = query.strip()
    if not stripped:
        raise BadRequest("the search query is empty")
    return stripped


class MemorySearch:
    """Hybrid search over the memory index of one backend."""

    def __init__(
        self,
        index: MemoryIndex,
        memory: MemoryStore,
        embedder: Embedder | None,
        *,
        fusion: FusionMethod = "minmax",
        text_weight: float = 0.5,
        vector_weight: float = 0.5,
        min_score: float | None = None,
        overfetch: int = 8,
        author_boost: float = AUTHOR_BOOST,
        people: Callable[[str], frozenset[str]] | None = None,
        summary_weight: float = 0.0,
        summary_top: int = 3,
        summary_bring_in: bool = False,
        fact_weight: float = 0.0,
        fact_top: int = 10,
        feedback_weight: float = 0.0,
        feedback_docs: int = 3,
        feedback_terms: int = 4,
        feedback_beta: float = 0.5,
        neighbour_weight: float = 0.0,
    ) -> None:
        """`people(workspace_id)`: the words of the names the workspace's people go by
        (shared.memory.people.WorkspacePeople); in a search of messages alone (`tiers=["message"]`,
        as memory_search asks) a query's words that name one of them are left out of its
        embedding (BM25 and the author boost still see them). None: nothing is left out.

        `summary_weight` > 0: a search of messages alone ranks Tier-2 summaries beside them, and
        the `summary_top` best lend that share of their score to the messages they summarise
        (with `summary_bring_in`, also to those that were not candidates): shared.memory.expand.

        `feedback_weight` > 0: the `feedback_docs` best hits seed a second search (their proper
        names, up to `feedback_terms`, added to its keywords; its vector moved `feedback_beta`
        towards theirs), whose scores are added at that weight. `neighbour_weight` > 0: a message
        gains that share of the best score of the candidates beside it in its session. Both:
        shared.memory.second_step."""
        if overfetch < 1:
            raise ValueError("overfetch must be at least 1")
        if (
            min(feedback_weight, feedback_beta, neighbour_weight) < 0
            or feedback_docs < 1
            or feedback_terms < 0
        ):
            raise ValueError(
                "feedback and neighbour settings must not be negative (feedback_docs at least 1)"
            )
        if author_boost < 0:
            raise ValueError("author_boost must not be negative")
        self._index = index
        self._memory = memory
        self._embedder = embedder
        self._fusion: FusionMethod = fusion
        self._text_weight = text_weight
        self._vector_weight = vector_weight
        # RRF scores are ~1/60: a min-max threshold would drop everything, so each method has its own.
        if min_score is None:
            min_score = DEFAULT_MIN_SCORE[fusion]
        self._min_score = min_score
        self._overfetch = overfetch
        self._author_boost = author_boost
        self._people = people
        self._summary_weight = summary_weight
        self._summary_top = summary_top
        self._summary_bring_in = summary_bring_in
        self._fact_weight = fact_weight
        self._fact_top = fact_top
        self._feedback_weight = feedback_weight
        self._feedback_docs = feedback_docs
        self._feedback_terms = feedback_terms
        self._feedback_beta = feedback_beta
        self._neighbour_weight = neighbour_weight

    def search(
        self,
        workspace_id: str,
        query: str,
        *,
        scope: RecallScope,
        k: int = 10,
        tiers: Sequence[MemoryTier] | None = None,
        session_id: str | None = None,
        mode: Literal["hybrid", "bm25", "vector"] = "hybrid",
        recent_from: str | None = None,
        now: datetime | None = None,
        tz: tzinfo = UTC,
        created_from: datetime | None = None,
        created_before: datetime | None = None,
    ) -> SearchOutcome:
        """The hits visible under `scope` (the index filters on it). `recent_from` names the
        session whose newest messages stand in when the index fails and the search is not limited
        to a session (`session_id` is None): a search from a conversation falls back on that
        conversation. A session outside `scope` never stands in.

        `now`: the asking turn's time; a time the query names ("last week", "in May", "before
        the move") is then resolved against it in `tz` and filters or boosts the hits
        (shared.memory.when). `created_from` / `created_before`: a window [from, before) on when
        the memories were said, applied by the index."""
        text = validate_query(query)
        if k < 1:
            raise BadRequest("k must be at least 1")
        if now is not None:
            return timed_search(
                self.search,
                workspace_id,
                text,
                now=now,
                tz=tz,
                scope=scope,
                k=k,
                tiers=tiers,
                session_id=session_id,
                mode=mode,
                recent_from=recent_from,
            )
        fetch = min(k * self._overfetch, _MAX_FETCH)

        vector: list[float] | None = None
        degraded: str | None = None
        if mode in ("hybrid", "vector"):
            if self._embedder is None:
                degraded = "no embedding model configured"
            else:
                try:
                    # Only over messages alone: in summaries and facts a name is content (a
                    # fact's subject), not the author of the words.
                    messages_only = tiers is not None and set(tiers) == {"message"}
                    embedded = self._without_people(workspace_id, text) if messages_only else text
                    vector = self._embedder.embed([embedded])[0]
                except Exception as exc:
                    logger.warning("query embedding failed; BM25 only", exc_info=True)
                    degraded = f"embedding model unavailable: {type(exc).__name__}"
        answered: SearchMode = mode if vector is not None else "bm25"
        if answered != mode:
            record(SEARCH_FALLBACK_BM25)

        # Summaries as search units pointing to their messages: asked for beside the messages.
        pointers: list[MemoryTier] = ["summary"] if self._summary_weight > 0 else []
        pointers += ["fact"] if self._fact_weight > 0 else []
        expanding = bool(pointers) and tiers is not None and set(tiers) == {"message"}
        index_query = IndexQuery(
            text=keyword_query(text) if answered != "vector" else None,
            vector=vector,
            k=fetch,
            tiers=["message", *pointers] if expanding else list(tiers) if tiers is not None else None,
            session_id=session_id,
            scope=scope,
            with_vectors=False,  # hits are ranked and shown, never compared again
            created_from=created_from,
            created_before=created_before,
        )
        try:
            result = self._index.search(workspace_id, index_query)
        except Exception as exc:
            logger.warning("memory index search failed; recent messages instead", exc_info=True)
            record(SEARCH_FALLBACK_RECENT)
            return self._recent(
                workspace_id,
                session_id or recent_from,
                k,
                tiers,
                f"memory index unavailable: {type(exc).__name__}",
                scope=scope,
            )

        fused = self._fuse(result)
        if expanding:
            fused = expand_summaries(
                fused,
                memory=self._memory,
                workspace_id=workspace_id,
                scope=scope,
                weight=self._summary_weight,
                top=self._summary_top,
                bring_in=self._summary_bring_in,
                fact_weight=self._fact_weight,
                fact_top=self._fact_top,
            )
        if self._author_boost:
            fused = boost_named_authors(fused, text, self._author_boost)
        if self._feedback_weight > 0:
            fused = self._second_search(workspace_id, text, fused, index_query, expanding)
        if self._neighbour_weight > 0:
            fused = lend_to_neighbours(fused, self._neighbour_weight)
        return SearchOutcome(hits=_by_record(fused, k), mode=answered, degraded=degraded)

    def _second_search(
        self, workspace_id: str, text: str, fused: list[FusedHit], first: IndexQuery, expanding: bool
    ) -> list[FusedHit]:
        """`fused` with a second search's scores added, seeded by its best hits (pseudo-relevance
        feedback, shared.memory.second_step); `fused` itself when it has nothing to add or fails."""
        seeds = fused[: self._feedback_docs]
        if not seeds:
            return fused
        exclude = STOP_WORDS | name_words(text) | self._names(workspace_id)
        terms = feedback_terms(
            [s.doc.text for s in seeds],
            exclude=exclude,
            limit=self._feedback_terms,
            weights=[s.score for s in seeds],
        )
        second_text = f"{first.text} {' '.join(terms)}" if first.text is not None and terms else first.text
        second_vector = first.vector
        if first.vector is not None and self._feedback_beta > 0 and isinstance(self._index, ReadsDocs):
            wanted = {record_of(s) for s in seeds}
            try:
                docs = self._index.get_docs(workspace_id, list(wanted))
            except Exception:
                logger.warning("the first hits' vectors unavailable; the query's own", exc_info=True)
                docs = []
            # The records' own documents (a chunk is part of one); each was a visible hit.
            own = [d.vector for d in docs if d.vector is not None and d.id in wanted]
            second_vector = feedback_vector(first.vector, own, self._feedback_beta)
        if second_text == first.text and second_vector == first.vector:
            return fused  # the second search would only repeat the first
        try:
            result = self._index.search(
                workspace_id, first.model_copy(update={"text": second_text, "vector": second_vector})
            )
        except Exception:
            logger.warning("the second search failed; the first's hits stand", exc_info=True)
            return fused
        second = self._fuse(result)
        if expanding:  # summaries and facts lend in the first step only; the answer is messages
            second = [f for f in second if f.doc.tier == "message"]
        if self._author_boost:
            second = boost_named_authors(second, text, self._author_boost)
        return add_second(fused, second, self._feedback_weight)

    def _fuse(self, result: IndexResult) -> list[FusedHit]:
        """Every hit of both halves of `result`, fused with this search's settings."""
        return fuse(
            result,
            method=self._fusion,
            text_weight=self._text_weight,
            vector_weight=self._vector_weight,
            k=len(result.text_hits) + len(result.vector_hits),
            min_score=self._min_score,
        )

    def _names(self, workspace_id: str) -> frozenset[str]:
        if self._people is None:
            return frozenset()
        try:
            return self._people(workspace_id)
        except Exception:
            logger.warning("the workspace's people unavailable", exc_info=True)
            return frozenset()

    def _without_people(self, workspace_id: str, text: str) -> str:
        """`text` without the words (and their "'s") that name the workspace's people; `text`
        itself when that would leave no word, or the names can't be read."""
        if self._people is None:
            return text
        try:
            names = self._people(workspace_id)
        except Exception:
            logger.warning("the workspace's people unavailable; names stay in the query", exc_info=True)
            return text
        return without_names(text, names)

    def _recent(
        self,
        workspace_id: str,
        session_id: str | None,
        k: int,
        tiers: Sequence[MemoryTier] | None,
        reason: str,
        *,
        scope: RecallScope,
    ) -> SearchOutcome:
        # A session's own messages are visible whatever their scope, so the session alone decides.
        if session_id is None or not visible(scope, session_id, None):
            return SearchOutcome(
                hits=[], mode="recent", degraded=f"{reason}; no session to read recent messages from"
            )
        if tiers is not None and "message" not in tiers:
            return SearchOutcome(
                hits=[], mode="recent", degraded=f"{reason}; recent messages are not in the tiers asked for"
            )
        try:
            records = self._memory.recent_messages(workspace_id, session_id, limit=k)
        except Exception as exc:
            logger.warning("recent messages unavailable too", exc_info=True)
            return SearchOutcome(
                hits=[], mode="recent", degraded=f"{reason}; session store unavailable: {type(exc).__name__}"
            )
        # Newest first: with no ranking to go by, recency is the best guess of relevance.
        hits = [
            MemoryHit(
                id=r.id,
                tier="message",
                text=r.text,
                score=0.0,
                session_id=r.session_id,
                created_at=r.created_at,
                metadata={"role": r.role, "seq": str(r.seq)},
            )
            for r in reversed(records)
        ]
        return SearchOutcome(hits=hits, mode="recent", degraded=reason)


def name_words(text: str) -> frozenset[str]:
    """The words of `text` that can name a person: casefolded, letters only, no stop words."""
    words = (m.casefold() for m in _WORD.findall(text))
    return frozenset(w for w in words if len(w) > 1 and w.isalpha() and w not in STOP_WORDS)


# The same few authors come back on every candidate of every search. Authors only: they are at
# most MAX_AUTHOR_CHARS long, where a query may be 100 KB.
_author_words = lru_cache(maxsize=4096)(name_words)


def without_names(text: str, names: frozenset[str]) -> str:
    """`text` without its words (and their "'s") whose casefold is in `names`; `text` itself
    when nothing else would be left."""
    if not names:
        return text
    kept = _POSSESSIVE_WORD.sub(lambda m: "" if m.group(1).casefold() in names else m.group(0), text)
    kept = " ".join(kept.split())
    return kept if _WORD.search(kept) else text


def boost_named_authors(fused: list[FusedHit], query: str, boost: float) -> list[FusedHit]:
    """`fused` re-ranked with `boost` x its best score added to each document whose author
    (metadata AUTHOR_KEY) the query names by any word of their name. A share of the best score
    rather than a constant, so it means the same to min-max scores (up to 1) and RRF's (~1/60)."""
    if not fused:
        return fused
    asked = name_words(query)
    bonus = boost * fused[0].score
    if not asked or bonus <= 0:
        return fused
    out = [
        replace(f, score=f.score + bonus)
        if asked & _author_words(f.doc.metadata.get(AUTHOR_KEY, "")[:MAX_AUTHOR_CHARS])
        else f
        for f in fused
    ]
    # Stable: documents that tie keep fuse()'s order (score, then id).
    return sorted(out, key=lambda f: -f.score)


def _by_record(fused: list[FusedHit], k: int) -> list[MemoryHit]:
    """The k best records: chunk documents folded into their record, whose best-scoring
    document stands for it."""
    best: dict[str, MemoryHit] = {}
    for f in fused:  # already best first
        if len(best) == k:
            break
        doc = f.doc
        record_id = doc.metadata.get(RECORD_ID_KEY, doc.id)
        if record_id in best:
            continue
        best[record_id] = MemoryHit(
            id=record_id,
            tier=doc.tier,
            text=doc.text,
            score=f.score,
            session_id=doc.session_id,
            created_at=doc.created_at,
            # The context is other messages' text: it helped find this one, it is not this one.
            metadata={key: value for key, value in doc.metadata.items() if key not in _NOT_SHOWN},
            bm25=f.text_score,
            vector=f.vector_score,
        )
    return list(best.values())
