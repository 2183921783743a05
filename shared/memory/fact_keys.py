"""Fact-augmented keys (LongMemEval's "key expansion", Wu et al. 2024): a Tier-1 message is
indexed together with the facts extracted from it.

A question often asks in other words than the message used ("What did Caroline research?" of
"I've been looking into adoption agencies"), and a fact extracted from the message restates it in
plain words ("Caroline is researching adoption agencies"). So each message document carries the
text of the facts whose provenance names it: metadata FACTS_KEY (one fact a line), which BM25
matches as a field of its own (the embedded index's FTS5 `facts` column, OpenSearch's `facts`
field, each at half the weight of the message's own words), and their mean is folded into its
vector (MemoryWriter's `fact_vector_weight`), as its context is. Metadata FACT_IDS_KEY holds the
facts' ids, so a fact that changes or goes is replaced or taken off.

Who calls it: whoever writes facts with per-message provenance (`Triple.message_ids` naming the
messages the fact was read from) calls `attach_fact_keys` with the facts just written, after the
store's write: extraction, per turn and in compaction alike, through
shared.consolidation.extraction_keys, which also keys the messages that were still in the
session's window when their facts were extracted, once they are indexed. Erasure calls
`drop_fact_keys` for the facts it deletes or scrubs (shared.memory.erasure), so no copy of their
text outlives them. A document that already holds exactly the keys asked for is not rewritten
(nor embedded again).

A message's documents are rewritten whole through MemoryWriter (its context read again from the
MemoryStore), so what a document holds is always what the writer builds from its parts. A
message not yet indexed (still in the session's window) is reported as pending: call again after
it rolls out. A fact keys only messages of its own session (`Triple.session_id`): a fact lives in
the scope of the session it was learnt in, and a message elsewhere may be visible more widely.
Needs an index that can read its documents back (`ReadsDocs`: both adapters); another is skipped.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from shared.memory.doc_keys import RECORD_ID_KEY
from shared.memory.facts import fact_text
from shared.memory.search import FACT_IDS_KEY, FACTS_KEY
from shared.memory.writer import MAX_FACT_KEY_CHARS, FactKey, MemoryWriter
from shared.models import IndexDoc, MemoryRecord, Triple
from shared.ports import Embedder, MemoryIndex, MemoryStore, ReadsDocs

logger = logging.getLogger(__name__)


@dataclass
class FactKeysResult:
    records: int = 0  # messages whose documents were rewritten
    docs: int = 0  # documents written
    pending: list[str] = field(default_factory=list)  # message ids not indexed yet
    skipped: int = 0  # (fact, message) pairs left out: another session, or the fact not active
    reason: str | None = None  # why nothing was done at all


def fact_key(triple: Triple) -> FactKey:
    """How a fact keys a message: its id and the text its fact-tier document has."""
    return FactKey(triple.id, fact_text(triple))


def _as_stored(key: FactKey) -> FactKey:
    """The key as a document holds it (MemoryWriter cuts it and folds its white space)."""
    return FactKey(key.id, " ".join(key.text[:MAX_FACT_KEY_CHARS].split()))


def keys_of(doc: IndexDoc) -> list[FactKey]:
    """The fact keys a message document holds now."""
    ids = doc.metadata.get(FACT_IDS_KEY, "").split()
    texts = doc.metadata.get(FACTS_KEY, "").split("\n")
    if not ids or len(ids) != len(texts):
        return []
    return [FactKey(i, t) for i, t in zip(ids, texts, strict=True)]


def attach_fact_keys(
    index: MemoryIndex,
    memory: MemoryStore,
    embedder: Embedder | None,
    workspace_id: str,
    triples: Sequence[Triple],
    *,
    writer: MemoryWriter | None = None,
) -> FactKeysResult:
    """Key each message named in an active fact's `message_ids` with that fact (replacing an
    earlier version of the same fact by id); see the module docstring."""
    adding: dict[str, dict[str, FactKey]] = defaultdict(dict)
    sessions: dict[str, str | None] = {}
    skipped = 0
    for t in triples:
        if t.workspace_id != workspace_id:
            raise ValueError(f"fact {t.id} belongs to workspace {t.workspace_id!r}")
        if t.status != "active":
            skipped += len(t.message_ids)
            continue
        for message_id in t.message_ids:
            adding[message_id][t.id] = fact_key(t)
            sessions.setdefault(message_id, t.session_id)

    def change(doc: IndexDoc, keys: list[FactKey]) -> list[FactKey] | None:
        nonlocal skipped
        new = adding[doc.id]
        if sessions.get(doc.id) != doc.session_id:
            skipped += len(new)
            return None
        if {_as_stored(k) for k in new.values()} <= set(keys):
            return None  # keyed with these very facts already
        kept = [k for k in keys if k.id not in new]
        return [*kept, *new.values()]

    result = _rewrite(index, memory, embedder, workspace_id, list(adding), change=change, writer=writer)
    result.skipped += skipped
    return result


def drop_fact_keys(
    index: MemoryIndex,
    memory: MemoryStore,
    embedder: Embedder | None,
    workspace_id: str,
    *,
    gone: Sequence[Triple] = (),
    replaced: Sequence[Triple] = (),
    writer: MemoryWriter | None = None,
) -> FactKeysResult:
    """Take the `gone` facts off the messages they key, and put the `replaced` ones' new text in
    place of the old (erasure's scrubbed facts). Messages that are gone themselves are skipped."""
    removing = {t.id for t in gone}
    updated = {t.id: fact_key(t) for t in replaced}
    ids = list(dict.fromkeys(m for t in [*gone, *replaced] for m in t.message_ids))

    def change(_doc: IndexDoc, keys: list[FactKey]) -> list[FactKey] | None:
        changed = [updated.get(k.id, k) for k in keys if k.id not in removing]
        return None if [_as_stored(k) for k in changed] == keys else changed

    result = _rewrite(index, memory, embedder, workspace_id, ids, change=change, writer=writer)
    result.pending = []  # a message that is not indexed holds no fact text to drop
    return result


def _rewrite(
    index: MemoryIndex,
    memory: MemoryStore,
    embedder: Embedder | None,
    workspace_id: str,
    message_ids: list[str],
    *,
    change: Callable[[IndexDoc, list[FactKey]], list[FactKey] | None],
    writer: MemoryWriter | None,
) -> FactKeysResult:
    result = FactKeysResult()
    if not message_ids:
        return result
    if not isinstance(index, ReadsDocs):
        result.reason = "the memory index cannot read its documents back"
        return result
    writer = writer or MemoryWriter(index, embedder)
    # A record's own document (chunk 0) holds its keys; its chunks hold copies.
    own = {
        d.id: d
        for d in index.get_docs(workspace_id, message_ids)
        if d.tier == "message" and d.metadata.get(RECORD_ID_KEY, d.id) == d.id
    }
    result.pending = [m for m in message_ids if m not in own]
    wanted: dict[str, dict[int, list[FactKey]]] = defaultdict(dict)  # session -> seq -> new keys
    for doc in own.values():
        keys = change(doc, keys_of(doc))
        at = doc.metadata.get("seq", "")
        if keys is None or not at.isdigit() or doc.session_id is None:
            continue
        wanted[doc.session_id][int(at)] = keys
    for session_id, by_seq in wanted.items():
        records = _around(memory, workspace_id, session_id, sorted(by_seq), writer)
        position = {r.seq: i for i, r in enumerate(records)}
        for seq, new_keys in sorted(by_seq.items()):
            i = position.get(seq)
            if i is None:
                continue  # indexed but no longer stored (erased meanwhile): nothing to rebuild from
            record = records[i]
            written = writer.write_messages(
                workspace_id,
                [record],
                before=records[max(0, i - writer.context_before) : i],
                after=records[i + 1 : i + 1 + writer.context_after],
                facts={record.id: new_keys},
            )
            result.records += 1
            result.docs += written.docs
    return result


def _around(
    memory: MemoryStore, workspace_id: str, session_id: str, seqs: list[int], writer: MemoryWriter
) -> list[MemoryRecord]:
    """The session's stored records at `seqs` and their neighbours, oldest first: one read per
    run of nearby positions."""
    spans: list[list[int]] = []
    for seq in seqs:
        lo, hi = seq - writer.context_before, seq + writer.context_after
        if spans and lo <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    out: dict[int, MemoryRecord] = {}
    for lo, hi in spans:
        for r in memory.get_messages(workspace_id, session_id, after_seq=lo - 1, limit=hi - max(lo, 0) + 1):
            out.setdefault(r.seq, r)
    return [out[s] for s in sorted(out)]
