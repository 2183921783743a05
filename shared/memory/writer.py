"""The memory write path: Tier-1 records (and summaries, facts) into index documents with vectors.

Everything the index is asked to find goes through here, so what helps retrieval is decided once,
for every backend, and the LoCoMo benchmark (bench/locomo.py) measures exactly what the product
writes. A message is indexed with its conversational context, because a message is often only
understandable next to its neighbours: an answer ("yes, twice a week") shares no word with the
question it answers. Per record:

- `text` is the record's own text; the messages around it in its session (up to
  `context_before` before and `context_after` after) go to metadata "context", which BM25 indexes
  in a second field at a lower weight (the embedded index: an FTS5 column weighted 0.5);
- the vector is the record's own embedding plus `context_vector_weight` times the mean embedding
  of those neighbours, re-normalised: the k-NN side sees the same context, and no extra text is
  embedded (the neighbours are embedded anyway, and the embedding cache returns them);
- context never crosses sessions or users: a neighbour written by another user (a group chat) is
  left out, so erasing a user's records erases every indexed copy of their words;
- every document carries its record's MemoryScope (its chunks too): what the index's search
  filters on, so a reader finds only what their RecallScope reaches (shared.memory.scope).
  `message_scope` is the scope a rolled-out message is written with.

A text longer than one chunk (shared.memory.embeddings.chunking, spec 003: 1600 characters with
320 of overlap) is indexed as one document per chunk: the first under the record's id, the others
under `chunk_doc_id(record_id, i)`, each naming its record in metadata "record_id", and search
folds them back into one hit. When the embedder fails the documents are written without vectors
(logged, metadata "embedding": "missing") rather than lost: BM25 finds them, and writing the
same records again later adds the vectors in place (ids are stable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cachetools import TTLCache

from shared.memory.doc_keys import RECORD_ID_KEY, message_doc
from shared.memory.embeddings.chunking import CHUNK_CHARS, chunk_text
from shared.memory.scope import owner_scope
from shared.memory.search import CONTEXT_KEY, FACT_IDS_KEY, FACTS_KEY
from shared.models import IndexDoc, MemoryRecord, MemoryScope, Summary
from shared.ports import Embedder, MemoryIndex, MemoryStore

logger = logging.getLogger(__name__)

EMBEDDING_KEY = "embedding"  # metadata: "missing" on documents written without a vector
# A neighbour contributes at most this much text to a record's context: a pasted document next to
# a short reply must not turn the reply into a copy of the document.
MAX_NEIGHBOUR_CHARS = 500
# A message's facts (fact-augmented keys) weigh this much in its vector, as their mean, beside its
# own text (1.0) and its context (context_vector_weight). bench/locomo.py measured it.
DEFAULT_FACT_VECTOR_WEIGHT = 0.5
# At most this many facts key one message, newest kept (a fact is short: its text is capped below).
MAX_FACT_KEYS = 20
MAX_FACT_KEY_CHARS = 300


class FactKey(NamedTuple):
    """A fact extracted from a message, as it keys the message's document: the fact's id (a
    Triple's) and its text ("subject predicate: object")."""

    id: str
    text: str


def chunk_doc_id(record_id: str, index: int) -> str:
    """The document id of chunk `index` of a record (chunk 0 is the record's own id)."""
    return record_id if index == 0 else f"{record_id}#{index}"


def record_doc_ids(record_id: str, text: str) -> list[str]:
    """Every document id the writer gives a record with this text (for deleting it)."""
    return [chunk_doc_id(record_id, c.index) for c in chunk_text(text)] or [record_id]


def summary_doc(summary: Summary, vector: list[float] | None = None) -> IndexDoc:
    """The index document of a Tier-2 summary: what compaction writes and erasure rewrites."""
    return IndexDoc(
        id=summary.id,
        workspace_id=summary.workspace_id,
        session_id=summary.session_id,
        tier="summary",
        text=summary.text,
        vector=vector,
        created_at=summary.end_at,
        metadata={"first_seq": str(summary.first_seq), "last_seq": str(summary.last_seq)},
        scope=summary.scope,
    )


def message_scope(role: str, user_id: str | None, *, conversation: str, group: bool) -> MemoryScope:
    """The scope a Tier-1 message is written with: its channel conversation (without the thread),
    and its people: the writer of a user message; for a reply or a tool result, the person it
    answered in a direct conversation, nobody in a group (there the reply belongs to the group's
    conversation, which every member recalls, not to the one who happened to ask)."""
    users = (user_id,) if role == "user" or not group else ()
    return owner_scope(conversation, users, group=group)


@dataclass
class WriteResult:
    docs: int = 0  # documents upserted
    embedded: int = 0  # of which with a vector
    text_only: list[str] = field(default_factory=list)  # ids written without a vector
    error: str | None = None  # why the vectors are missing, when they are


class MemoryWriter:
    """Builds and upserts index documents; one instance serves every workspace."""

    def __init__(
        self,
        index: MemoryIndex,
        embedder: Embedder | None,
        *,
        context_before: int = 2,
        context_after: int = 2,
        context_vector_weight: float = 0.5,
        fact_vector_weight: float = DEFAULT_FACT_VECTOR_WEIGHT,
    ) -> None:
        if context_before < 0 or context_after < 0 or context_vector_weight < 0 or fact_vector_weight < 0:
            raise ValueError("context sizes and weight must not be negative")
        self.fact_vector_weight = fact_vector_weight
        self._index = index
        self._embedder = embedder
        self.context_before = context_before
        self.context_after = context_after
        self.context_vector_weight = context_vector_weight

    # ------------------------------------------------------------------ messages

    def write_messages(
        self,
        workspace_id: str,
        records: Sequence[MemoryRecord],
        *,
        before: Sequence[MemoryRecord] = (),
        after: Sequence[MemoryRecord] = (),
        facts: Mapping[str, Sequence[FactKey]] | None = None,
    ) -> WriteResult:
        """Index `records`, a run of Tier-1 messages oldest first, with their context.

        `facts` (record id -> the facts extracted from it, shared.memory.fact_keys) key a record's
        documents too: their text in metadata FACTS_KEY (a BM25 field of its own) and their mean
        in its vector at `fact_vector_weight`. A record not named has none.

        `before` are the messages just before the run and `after` those just after it (oldest
        first; either may be shorter than the context wanted, or empty): they lend context and
        are not written themselves. Records of several sessions may be mixed; context is only
        taken within a record's own session.
        """
        for r in [*records, *before, *after]:
            if r.workspace_id != workspace_id:
                raise ValueError(f"memory record {r.id} belongs to workspace {r.workspace_id!r}")
        if not records:
            return WriteResult()
        run = [*before, *records, *after]
        first = len(before)
        plans: list[_Plan] = []
        for offset, record in enumerate(records):
            i = first + offset
            neighbours = [
                *_same_thread(run, i, range(i - 1, i - 1 - self.context_before, -1))[::-1],
                *_same_thread(run, i, range(i + 1, i + 1 + self.context_after)),
            ]
            keys = list((facts or {}).get(record.id, ()))[-MAX_FACT_KEYS:]
            plans.append(_Plan(record, neighbours, keys))
        return self._write(workspace_id, plans)

    # ------------------------------------------------------------------ any document

    def write_docs(self, workspace_id: str, docs: Sequence[IndexDoc]) -> WriteResult:
        """Index ready-made documents (summaries, facts): chunked and embedded when they have no
        vector yet; a document that brings its own vector is written as it is."""
        for doc in docs:
            if doc.workspace_id != workspace_id:
                raise ValueError(f"index doc {doc.id} belongs to workspace {doc.workspace_id!r}")
        ready = [d for d in docs if d.vector is not None]
        todo = [d for d in docs if d.vector is None]
        result = self._write(workspace_id, [_Plan(d, []) for d in todo]) if todo else WriteResult()
        if ready:
            self._index.upsert(workspace_id, ready)
            result.docs += len(ready)
            result.embedded += len(ready)
        return result

    # ------------------------------------------------------------------ shared

    def _write(self, workspace_id: str, plans: list[_Plan]) -> WriteResult:
        docs: list[IndexDoc] = []
        # Per document: the indexes (into `texts`) of its own text, its neighbours and its facts.
        wanted: list[tuple[int, list[int], list[int]]] = []
        texts: dict[str, int] = {}

        def slot(text: str) -> int:
            return texts.setdefault(text, len(texts))

        for plan in plans:
            # A neighbour is embedded by its head (one chunk's worth): the model truncates anyway.
            around = [slot(n.text[:CHUNK_CHARS]) for n in plan.neighbours if n.text.strip()]
            context = "\n".join(n.text[:MAX_NEIGHBOUR_CHARS] for n in plan.neighbours if n.text.strip())
            keyed = [slot(f.text[:MAX_FACT_KEY_CHARS]) for f in plan.facts if f.text.strip()]
            for chunk_doc in plan.docs(context):
                docs.append(chunk_doc)
                wanted.append((slot(chunk_doc.text), around, keyed))

        vectors, error = self._embed(list(texts))
        matrix = None
        if vectors:
            # Here, not at the top: the agent imports this module at cold start, and only a
            # roll-out with vectors needs numpy (~0.3 s to import).
            import numpy as np

            matrix = np.asarray(vectors, dtype=np.float64)
        result = WriteResult(docs=len(docs), error=error)
        out: list[IndexDoc] = []
        for doc, (own, around, keyed) in zip(docs, wanted, strict=True):
            vector = (
                _blend(
                    matrix,
                    own,
                    around,
                    self.context_vector_weight,
                    keyed=keyed,
                    fact_weight=self.fact_vector_weight,
                )
                if matrix is not None
                else None
            )
            if vector is None:
                result.text_only.append(doc.id)
                out.append(doc.model_copy(update={"metadata": {**doc.metadata, EMBEDDING_KEY: "missing"}}))
            else:
                result.embedded += 1
                out.append(doc.model_copy(update={"vector": vector}))
        self._index.upsert(workspace_id, out)
        return result

    def _embed(self, texts: list[str]) -> tuple[list[list[float]] | None, str | None]:
        if self._embedder is None:
            return None, "no embedding model configured"
        if not texts:
            return [], None
        try:
            vectors = self._embedder.embed(texts)
        except Exception as exc:
            # Never lost: the documents go in text-only, and BM25 finds them meanwhile.
            logger.warning("embedding failed; indexing text only", exc_info=True)
            return None, f"embedding model unavailable: {type(exc).__name__}"
        if len(vectors) != len(texts):
            logger.warning("embedder returned %d vectors for %d texts; text only", len(vectors), len(texts))
            return None, "embedding model returned the wrong number of vectors"
        return vectors, None


class RecentTails:
    """The last few rolled-out records of recently active sessions, in this process.

    They are the context before the next roll-out's first record. Reading them back from the
    MemoryStore would cost the turn a round trip (the warm turn's budget is 3 DynamoDB calls), so a
    process keeps them from the roll-out before; a process that has not seen the session lately
    (a cold Lambda, a restart) reads them once. Entries expire after `ttl_s`, and `forget` drops
    a workspace's (the right to erasure), so text erased from the stores is not reused here.
    """

    def __init__(self, *, max_sessions: int = 4096, ttl_s: float = 900.0, keep: int = 2) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        # Full, the least recently used session goes.
        self._tails: TTLCache[tuple[str, str], tuple[MemoryRecord, ...]] = TTLCache(
            max_sessions, ttl_s, timer=time.monotonic
        )

    def get(self, workspace_id: str, session_id: str, before_seq: int) -> list[MemoryRecord] | None:
        """The records just before `before_seq`, or None when this process does not know them."""
        with self._lock:
            records = self._tails.get((workspace_id, session_id))
        if not records or records[-1].seq != before_seq - 1:
            return None
        return list(records)

    def put(self, records: Sequence[MemoryRecord]) -> None:
        if not records:
            return
        last = records[-1]
        # Without the structured message: only the text, owner and position are ever used.
        kept = tuple(r.model_copy(update={"message": None}) for r in records[-self._keep :])
        with self._lock:
            self._tails[(last.workspace_id, last.session_id)] = kept

    def forget(self, workspace_id: str) -> None:
        with self._lock:
            for key in [k for k in self._tails if k[0] == workspace_id]:
                del self._tails[key]


RECENT_TAILS = RecentTails()


def index_rolled_out(
    index: MemoryIndex,
    memory: MemoryStore,
    embedder: Embedder | None,
    records: Sequence[MemoryRecord],
    following: Sequence[MemoryRecord] = (),
    *,
    tails: RecentTails = RECENT_TAILS,
    writer: MemoryWriter | None = None,
) -> WriteResult:
    """Index Tier-1 records, one session's, as they roll out of its window (the turn's commit,
    emergency compaction). Context before them: the records rolled out just before (RecentTails,
    else one MemoryStore read); after them: `following`, the messages still in the window.

    The index's errors propagate (the caller retries the commit); the embedder's and the
    MemoryStore's do not: the records are then indexed without vectors, or without the context
    before them.
    """
    if not records:
        return WriteResult()
    writer = writer or MemoryWriter(index, embedder)
    first = records[0]
    before: list[MemoryRecord] = []
    if writer.context_before and first.seq > 0:
        known = tails.get(first.workspace_id, first.session_id, first.seq)
        if known is not None:
            before = known
        else:
            try:
                stored = memory.recent_messages(
                    first.workspace_id, first.session_id, limit=writer.context_before + len(records)
                )
                # A retried commit may find its own records stored already: only earlier ones count.
                before = [r for r in stored if r.seq < first.seq]
            except Exception:
                logger.warning(
                    "previous messages unavailable; indexing without them as context", exc_info=True
                )
    result = writer.write_messages(
        first.workspace_id,
        records,
        before=before[-writer.context_before :] if writer.context_before else [],
        after=list(following[: writer.context_after]),
    )
    tails.put([*before, *records])
    return result


@dataclass
class _Plan:
    source: MemoryRecord | IndexDoc
    neighbours: list[MemoryRecord]
    facts: list[FactKey] = field(default_factory=list)

    def docs(self, context: str) -> list[IndexDoc]:
        base = self._base()
        chunks = chunk_text(base.text)
        metadata = dict(base.metadata)
        if context:
            metadata[CONTEXT_KEY] = context
        keys = [f for f in self.facts if f.text.strip()]
        if keys:
            metadata[FACTS_KEY] = "\n".join(" ".join(f.text[:MAX_FACT_KEY_CHARS].split()) for f in keys)
            metadata[FACT_IDS_KEY] = " ".join(f.id for f in keys)
        if len(chunks) <= 1:
            return [base.model_copy(update={"metadata": metadata})]
        return [
            base.model_copy(
                update={
                    "id": chunk_doc_id(base.id, c.index),
                    "text": c.text,
                    "metadata": {**metadata, RECORD_ID_KEY: base.id, "chunk": str(c.index)},
                }
            )
            for c in chunks
        ]

    def _base(self) -> IndexDoc:
        src = self.source
        if isinstance(src, IndexDoc):
            return src
        return message_doc(src)


def _same_thread(run: Sequence[MemoryRecord], i: int, positions: range) -> list[MemoryRecord]:
    """The records at `positions` (nearest first) that may lend `run[i]` context: same session
    and same user, stopping at the first that may not (context does not skip over a gap)."""
    me = run[i]
    out: list[MemoryRecord] = []
    for j in positions:
        if not 0 <= j < len(run):
            break
        other = run[j]
        if other.session_id != me.session_id or other.user_id != me.user_id:
            break
        out.append(other)
    return out


def _blend(
    vectors: Any,
    own: int,
    around: list[int],
    weight: float,
    *,
    keyed: list[int] | None = None,
    fact_weight: float = 0.0,
) -> list[float] | None:
    """normalise(own + weight * mean(around) + fact_weight * mean(keyed)); None when the result
    is not a usable vector."""
    import numpy as np  # loaded already: `vectors` is a numpy matrix

    mixed = vectors[own]
    if around and weight > 0:
        mixed = mixed + weight * vectors[around].mean(axis=0)
    if keyed and fact_weight > 0:
        mixed = mixed + fact_weight * vectors[keyed].mean(axis=0)
    norm = float(np.linalg.norm(mixed))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    result: list[float] = (mixed / norm).tolist()
    return result
