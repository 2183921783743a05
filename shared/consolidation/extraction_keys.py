"""Fact-augmented keys for extracted facts (shared.memory.fact_keys): the facts an extraction
stores, per turn or in compaction, go onto the index documents of the messages they were read
from (shared.consolidation.extraction's per-message provenance, FactOutcome.sources).

`key_extracted` runs under the session's lease (compaction's, which per-turn extraction shares),
after FactWriter.store:

1. a fact the call changed (a new value for its key) gets its new text on the documents it keys
   already (drop_fact_keys' `replaced`; a document that holds it as it is stays as it is);
2. each fact is attached to the messages this call attributed it to;
3. a message that is not indexed yet, because it is still in the session's window (per-turn
   extraction reads it there; a message is indexed when it rolls out), is remembered as pending:
   (seq, message id, fact id) in the consolidation-state checkpoint "factkeys:<session>", ids and
   seqs only, never text;
4. the pending pairs of earlier calls are tried again, each fact as the store holds it now: its
   current text (a value changed meanwhile keys with the new value); a fact no longer active
   (deleted by erasure, merged away by maintenance) or no longer naming the message keys nothing,
   and its pairs are dropped. A pair whose message has rolled out (seq below the session's
   rolled_out_count) yet has no document (erased, or its index write lost) is dropped too, and
   beyond MAX_PENDING the oldest go.

Every per-turn extraction and every compaction batch calls it, so a message that rolls out at a
turn's commit is keyed by the extraction that turn's TurnCommitted runs (a debounce later), or by
compaction when per-turn extraction is off; meanwhile its document is searchable without them.
Errors are logged, never raised: the facts are stored whatever becomes of their keys, and the
pending pairs stay for the next call.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from shared.backend import Backend
from shared.memory.fact_keys import attach_fact_keys, drop_fact_keys
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, Triple
from shared.ports import ReadsDocs

log = logging.getLogger("sigil.consolidation.keys")

# Pairs kept waiting per session: a window's messages times the facts of each, with room to spare.
MAX_PENDING: Final = 400
# Facts read per subject when a pending pair's fact is looked up again.
SUBJECT_SCAN: Final = 500


class Pending(NamedTuple):
    seq: int
    message_id: str
    fact_id: str


@dataclass
class KeysOutcome:
    docs: int = 0  # message documents rewritten with their keys
    pending: int = 0  # (message, fact) pairs waiting for their message to be indexed
    error: str | None = None  # why this call keyed nothing (the pairs are kept)


def pending_name(session_id: str) -> str:
    return f"factkeys:{session_id}"


def pending_keys(backend: Backend, workspace_id: str, session_id: str) -> list[Pending]:
    """The session's pairs waiting for their message's document; [] for an unreadable value."""
    value = backend.consolidation.get_checkpoint(workspace_id, pending_name(session_id))
    if not value:
        return []
    try:
        return [Pending(int(seq), str(m), str(f)) for seq, m, f in json.loads(value)]
    except (ValueError, TypeError):
        log.warning("unreadable pending fact keys", extra={"session_id": session_id})
        return []


def key_extracted(
    backend: Backend,
    workspace_id: str,
    session_id: str,
    *,
    written: Sequence[Triple] = (),
    sources: Mapping[str, Sequence[str]] | None = None,
    seqs: Mapping[str, int] | None = None,
    rolled_out: int,
) -> KeysOutcome:
    """Key the messages of `written` (its `sources`: fact id -> message ids; `seqs`: message id
    -> seq) and the session's pending pairs; see the module docstring. `rolled_out` is the
    session's rolled_out_count as read before the call (an older value only keeps pairs longer)."""
    outcome = KeysOutcome()
    sources, seqs = sources or {}, seqs or {}
    try:
        before = pending_keys(backend, workspace_id, session_id)
        fresh = [
            Pending(seqs[m], m, t.id)
            for t in written
            if t.status == "active"
            for m in sources.get(t.id, ())
            if m in seqs
        ]
        pairs = list(dict.fromkeys([*before, *fresh]))
    except Exception as exc:  # noqa: BLE001 -- the facts are stored; their keys wait
        return _failed(outcome, exc, workspace_id, session_id)
    try:
        remaining = _key(
            backend,
            workspace_id,
            written=written,
            sources=sources,
            pairs=pairs,
            rolled_out=rolled_out,
            outcome=outcome,
        )
    except Exception as exc:  # noqa: BLE001 -- kept for the next call
        _failed(outcome, exc, workspace_id, session_id)
        remaining = pairs
    remaining = remaining[-MAX_PENDING:]
    outcome.pending = len(remaining)
    if remaining != before:
        try:
            value = json.dumps([list(p) for p in remaining], separators=(",", ":"))
            backend.consolidation.put_checkpoint(workspace_id, pending_name(session_id), value)
        except Exception as exc:  # noqa: BLE001 -- the next call finds the old list, and less
            _failed(outcome, exc, workspace_id, session_id)
    return outcome


def _key(
    backend: Backend,
    workspace_id: str,
    *,
    written: Sequence[Triple],
    sources: Mapping[str, Sequence[str]],
    pairs: list[Pending],
    rolled_out: int,
    outcome: KeysOutcome,
) -> list[Pending]:
    index, memory, embedder = backend.index, backend.memory, backend.embedder
    if not isinstance(index, ReadsDocs):
        return []  # an index that cannot read its documents back is never keyed (fact_keys)
    writer = MemoryWriter(index, embedder)
    active = [t for t in written if t.status == "active"]
    # 1. A changed value, on the documents the fact keys already (not the ones it is added to).
    older = [
        t.model_copy(update={"message_ids": [m for m in t.message_ids if m not in sources.get(t.id, ())]})
        for t in active
    ]
    if older := [t for t in older if t.message_ids]:
        changed = drop_fact_keys(index, memory, embedder, workspace_id, replaced=older, writer=writer)
        outcome.docs += changed.docs
    # 2 and 4. Every pair, each fact as the store holds it now.
    facts = {t.id: t for t in active}
    facts |= _current(backend, workspace_id, {p.fact_id for p in pairs} - facts.keys())
    live: list[Pending] = []
    messages: dict[str, list[str]] = defaultdict(list)
    for p in pairs:
        fact = facts.get(p.fact_id)
        if fact is None or fact.status != "active" or p.message_id not in fact.message_ids:
            continue
        live.append(p)
        messages[p.fact_id].append(p.message_id)
    if not live:
        return []
    keyed = [facts[f].model_copy(update={"message_ids": ids}) for f, ids in messages.items()]
    result = attach_fact_keys(index, memory, embedder, workspace_id, keyed, writer=writer)
    outcome.docs += result.docs
    waiting = set(result.pending)
    return [p for p in live if p.message_id in waiting and p.seq >= rolled_out]


def _current(backend: Backend, workspace_id: str, fact_ids: set[str]) -> dict[str, Triple]:
    """The active facts among `fact_ids`, read from the store: found by the subject their index
    documents name (a fact without one is taken for gone: search could not find it either)."""
    if not fact_ids or not isinstance(backend.index, ReadsDocs):
        return {}
    subjects = {
        d.metadata["subject"]
        for d in backend.index.get_docs(workspace_id, sorted(fact_ids))
        if d.tier == "fact" and d.id in fact_ids and d.metadata.get("subject")
    }
    found: dict[str, Triple] = {}
    for subject in sorted(subjects):
        for t in backend.memory.triples_by_subject(
            workspace_id, subject, scope=WORKSPACE_WIDE, limit=SUBJECT_SCAN
        ):
            if t.id in fact_ids:
                found[t.id] = t
    return found


def _failed(outcome: KeysOutcome, exc: Exception, workspace_id: str, session_id: str) -> KeysOutcome:
    outcome.error = type(exc).__name__
    log.warning(
        "extracted facts not keyed onto their messages",
        extra={"workspace_id": workspace_id, "session_id": session_id, "error_type": type(exc).__name__},
    )
    return outcome


__all__ = ["MAX_PENDING", "KeysOutcome", "Pending", "key_extracted", "pending_keys", "pending_name"]
