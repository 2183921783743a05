"""Tier-2 summaries as search units that point to their messages (a second retrieval step).

A question whose answer is spread over a conversation ("What activities does Melanie do with her
family?") matches a summary of the session better than any one message of it, since the summary
says it all in a few sentences. So a search of messages can rank summaries beside them, and a
summary that ranks lends its score to the messages it summarises (its session's messages with
seq in [first_seq, last_seq], the summary document's metadata): each of them gains
`weight` x the summary's fused score, and with `bring_in` those that were not candidates join
the candidates at that score (read from the MemoryStore, each kept only if visible under the
search's scope). Summaries themselves are not returned: the search asked for messages.

Only the `top` best-ranked summaries lend (a session's summary covers dozens of messages; more of
them would flood the list with whole sessions). Used by MemorySearch when `summary_weight` > 0.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from shared.memory.doc_keys import RECORD_ID_KEY, message_doc
from shared.memory.fusion import FusedHit
from shared.memory.scope import visible
from shared.models import IndexDoc, RecallScope
from shared.ports import MemoryStore

logger = logging.getLogger(__name__)

# Metadata of a fact document: the messages it was read from (Triple.message_ids), space-separated.
MESSAGE_IDS_KEY = "message_ids"
# Each summary brings at most this many messages (a batch summary covers 50).
MAX_SPAN = 200


def expand_summaries(
    fused: list[FusedHit],
    *,
    memory: MemoryStore,
    workspace_id: str,
    scope: RecallScope,
    weight: float,
    top: int = 3,
    bring_in: bool = False,
    fact_weight: float = 0.0,
    fact_top: int = 10,
) -> list[FusedHit]:
    """`fused` (messages, and summaries and facts, best first) as messages alone, re-ranked by
    the scores the summaries and facts lend; see the module docstring."""
    summaries = [f for f in fused if f.doc.tier == "summary"][:top]
    facts = [f for f in fused if f.doc.tier == "fact"][:fact_top]
    messages = [f for f in fused if f.doc.tier == "message"]
    spans: list[tuple[str, int, int, float]] = []
    for s in summaries if weight > 0 else []:
        first, last = s.doc.metadata.get("first_seq", ""), s.doc.metadata.get("last_seq", "")
        if s.doc.session_id and first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
            spans.append((s.doc.session_id, int(first), int(last), weight * s.score))
    cited: dict[str, float] = {}
    for f in facts if fact_weight > 0 else []:
        for message_id in f.doc.metadata.get(MESSAGE_IDS_KEY, "").split():
            cited[message_id] = max(cited.get(message_id, 0.0), fact_weight * f.score)
    if not spans and not cited:
        return messages

    def lent(doc: IndexDoc) -> float:
        seq = doc.metadata.get("seq", "")
        at = int(seq) if seq.isdigit() else None
        from_summary = max(
            (b for sid, lo, hi, b in spans if at is not None and sid == doc.session_id and lo <= at <= hi),
            default=0.0,
        )
        return from_summary + cited.get(doc.metadata.get(RECORD_ID_KEY, doc.id), 0.0)

    out: list[FusedHit] = []
    seen: set[str] = set()
    for f in messages:
        bonus = lent(f.doc)
        out.append(replace(f, score=f.score + bonus) if bonus else f)
        seen.add(f.doc.metadata.get(RECORD_ID_KEY, f.doc.id))
    if bring_in:
        for session_id, lo, hi, bonus in spans:
            try:
                records = memory.get_messages(
                    workspace_id, session_id, after_seq=lo - 1, limit=min(hi - lo + 1, MAX_SPAN)
                )
            except Exception:
                logger.warning("a summary's messages unavailable; left out", exc_info=True)
                continue
            for r in records:
                if r.seq > hi or r.id in seen or not visible(scope, r.session_id, r.scope):
                    continue
                seen.add(r.id)
                out.append(FusedHit(doc=message_doc(r), score=bonus, text_score=None, vector_score=None))
    # Stable: ties keep the fused order (score, then id).
    return sorted(out, key=lambda f: -f.score)
