"""The messages phase (step 8): documents written without vectors get them.

The memory writer indexes text only when the embedder fails. The index lists the workspace's
Tier-1 documents without a vector (`missing_vectors`, an optional index method); their records
are read back from the MemoryStore (one read per run of consecutive messages, with the
neighbours around it) and written again through the MemoryWriter, 50 documents a batch. Ids are
stable, so the documents get their vectors in place; what the index no longer lists is done, so
the index itself is the cursor. Then Tier-2 summary documents written without vectors
(compaction indexes them text only when the embedder fails) are embedded again, from their own
text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from shared.consolidation.maintenance.context import Run
from shared.consolidation.maintenance.report import PhaseResult
from shared.memory.doc_keys import RECORD_ID_KEY
from shared.memory.writer import MemoryWriter
from shared.models import IndexDoc, MemoryRecord
from shared.ports import FindsMissingVectors

log = logging.getLogger("sigil.consolidation.maintenance")

# A run of consecutive messages to rewrite, with the neighbours before and after it.
_MessageRun = tuple[list[MemoryRecord], list[MemoryRecord], list[MemoryRecord]]


class VectorsResult(PhaseResult):
    messages_backfilled: int = 0
    summaries_backfilled: int = 0


def reembed(run: Run, after: str | None) -> VectorsResult:
    """Messages, then summaries; stopped when the deadline came first (the rest is found by the
    next run). `after` is the score phase's cursor: the index is this phase's own."""
    result = VectorsResult()
    if not _messages(run, result) or not _summaries(run, result):
        return result.stop()
    return result


def _messages(run: Run, result: VectorsResult) -> bool:
    index, embedder = run.backend.index, run.embedder
    if embedder is None or not isinstance(index, FindsMissingVectors):
        return True
    writer = MemoryWriter(index, embedder)
    batch = run.policy.embed_batch
    # Documents a rewrite cannot give a vector (the record is gone, or its vector is zero):
    # skipped for the rest of the run, so they never hold the loop.
    stuck: set[str] = set()
    while True:
        if run.out_of_time():
            return False
        listed = index.missing_vectors(run.workspace_id, tier="message", limit=batch + len(stuck))
        todo = [d for d in listed if d.id not in stuck][:batch]
        if not todo:
            return True
        records, runs = _message_runs(run, todo)
        for records_run, before, after in runs:
            written = writer.write_messages(run.workspace_id, records_run, before=before, after=after)
            if written.error is not None:
                log.warning(
                    "message re-embedding failed; the rest of this run goes without it",
                    extra={"workspace_id": run.workspace_id, "error": written.error},
                )
                run.give_up_embedding(result, len(todo))
                return True
            result.messages_backfilled += written.embedded
            stuck.update(written.text_only)
        stuck.update(d.id for d in todo if _record_id(d) not in records)


def _summaries(run: Run, result: VectorsResult) -> bool:
    """Compaction indexes a summary as one document of its whole text (`_index_summary`), so its
    vector is that text's, embedded here as compaction would have."""
    index, embedder = run.backend.index, run.embedder
    if embedder is None or not isinstance(index, FindsMissingVectors):
        return True
    batch = run.policy.embed_batch
    stuck: set[str] = set()  # documents the model gave a zero vector: not tried again this run
    while True:
        if run.out_of_time():
            return False
        listed = index.missing_vectors(run.workspace_id, tier="summary", limit=batch + len(stuck))
        todo = [d for d in listed if d.id not in stuck][:batch]
        if not todo:
            return True
        vectors = run.embed_or_give_up(result, embedder, [d.text for d in todo], "summary re-embedding")
        if vectors is None:
            return True
        ready = [d.model_copy(update={"vector": v}) for d, v in zip(todo, vectors, strict=True) if any(v)]
        stuck.update(d.id for d, v in zip(todo, vectors, strict=True) if not any(v))
        if ready:
            index.upsert(run.workspace_id, ready)
        result.summaries_backfilled += len(ready)


def _message_runs(run: Run, docs: Sequence[IndexDoc]) -> tuple[set[str], list[_MessageRun]]:
    """The records of `docs` read back from the MemoryStore as runs of consecutive messages,
    each with the neighbours before and after it that lend context; and the ids found."""
    wanted: dict[str, dict[int, str]] = {}  # session -> seq -> record id
    for d in docs:
        seq = d.metadata.get("seq", "")
        if d.session_id and seq.isdigit():
            wanted.setdefault(d.session_id, {})[int(seq)] = _record_id(d)
    found: set[str] = set()
    runs: list[_MessageRun] = []
    context = 2  # MemoryWriter's default context on either side
    for session_id, by_seq in sorted(wanted.items()):
        for lo, hi in _spans(sorted(by_seq)):
            start = max(-1, lo - 1 - context)
            read = run.backend.memory.get_messages(
                run.workspace_id, session_id, after_seq=start, limit=hi - start + context
            )
            span = [r for r in read if lo <= r.seq <= hi and by_seq.get(r.seq) == r.id]
            if not span:
                continue
            found.update(r.id for r in span)
            runs.append(
                (span, [r for r in read if r.seq < span[0].seq], [r for r in read if r.seq > span[-1].seq])
            )
    return found, runs


def _record_id(doc: IndexDoc) -> str:
    return doc.metadata.get(RECORD_ID_KEY) or doc.id


def _spans(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as (first, last) runs of consecutive numbers."""
    spans: list[tuple[int, int]] = []
    for seq in seqs:
        if spans and seq == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], seq)
        else:
            spans.append((seq, seq))
    return spans
