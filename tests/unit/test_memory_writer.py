"""shared.memory.writer: Tier-1 records and other documents into the real embedded index.

The embedder is tests/support's HashingEmbedder (deterministic, real vectors); an embedder that
fails is the local MiniLM pointed at a directory without weights.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from shared.adapters.embedded import SqliteMemoryIndex, SqliteMemoryStore
from shared.memory.doc_keys import AUTHOR_KEY, MAX_AUTHOR_CHARS, RECORD_ID_KEY
from shared.memory.embeddings.minilm import LocalMiniLM
from shared.memory.search import CONTEXT_KEY, MemorySearch
from shared.memory.writer import (
    EMBEDDING_KEY,
    MemoryWriter,
    RecentTails,
    index_rolled_out,
    record_doc_ids,
)
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery, MemoryRecord
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws-writer"
T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)


def rec(seq: int, text: str, *, session_id: str = "s1", user_id: str | None = "u1") -> MemoryRecord:
    return MemoryRecord(
        id=f"{session_id}-m{seq}",
        workspace_id=WS,
        session_id=session_id,
        role="user" if seq % 2 == 0 else "assistant",
        text=text,
        seq=seq,
        created_at=T0 + timedelta(minutes=seq),
        user_id=user_id,
    )


def stored(index: SqliteMemoryIndex, doc_id: str) -> IndexDoc:
    """The document as the index returns it (found by its own text's first word)."""
    for ws_hit in index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, text=doc_id.rsplit("-", maxsplit=1)[-1], k=1000)
    ).text_hits:
        if ws_hit.doc.id == doc_id:
            return ws_hit.doc
    raise AssertionError(f"{doc_id} not in the index")


TEXTS = ["m0 alpha", "m1 bravo", "m2 charlie", "m3 delta", "m4 echo", "m5 foxtrot", "m6 golf"]


def test_messages_get_their_neighbours_as_context_and_a_blended_vector(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS)]
    result = MemoryWriter(index, embedder).write_messages(WS, records)

    assert (result.docs, result.embedded, result.text_only, result.error) == (7, 7, [], None)
    doc = stored(index, "s1-m3")
    assert doc.text == "m3 delta"
    assert doc.metadata[CONTEXT_KEY] == "m1 bravo\nm2 charlie\nm4 echo\nm5 foxtrot"
    assert (doc.metadata["role"], doc.metadata["seq"], doc.metadata["user_id"]) == ("assistant", "3", "u1")
    assert doc.session_id == "s1" and doc.tier == "message" and doc.created_at == records[3].created_at
    # The edges have fewer neighbours.
    assert stored(index, "s1-m0").metadata[CONTEXT_KEY] == "m1 bravo\nm2 charlie"

    own, *around = (
        np.array(v) for v in embedder.embed(["m3 delta", "m1 bravo", "m2 charlie", "m4 echo", "m5 foxtrot"])
    )
    expected = own + 0.5 * np.mean(around, axis=0)
    expected /= np.linalg.norm(expected)
    assert doc.vector == pytest.approx(expected.tolist(), abs=1e-9)


def test_context_stays_in_its_session_and_with_its_user(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    records = [
        rec(0, "m0 alpha"),
        rec(1, "m1 bravo", user_id="u2"),  # another user's message in a group session
        rec(2, "m2 charlie"),
        rec(3, "m3 delta"),
        rec(0, "m0 other session", session_id="s2"),
    ]
    MemoryWriter(index, embedder).write_messages(WS, records)

    # m2's context stops at u2's message (it does not skip over it to m0), and never crosses sessions.
    assert stored(index, "s1-m2").metadata[CONTEXT_KEY] == "m3 delta"
    assert CONTEXT_KEY not in stored(index, "s1-m1").metadata
    assert CONTEXT_KEY not in stored(index, "s2-m0").metadata


def test_a_user_message_names_its_author_and_a_reply_names_none(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    records = [
        rec(0, "m0 alpha").model_copy(update={"author": "Ada Lovelace"}),
        # A reply carries no author even if one were set: its words are the agent's.
        rec(1, "m1 bravo").model_copy(update={"author": "Ada Lovelace"}),
        rec(2, "m2 charlie").model_copy(update={"author": "x" * (MAX_AUTHOR_CHARS + 50)}),
        rec(4, "m4 delta"),
    ]
    MemoryWriter(index, embedder).write_messages(WS, records)

    assert stored(index, "s1-m0").metadata[AUTHOR_KEY] == "Ada Lovelace"
    assert AUTHOR_KEY not in stored(index, "s1-m1").metadata
    assert stored(index, "s1-m2").metadata[AUTHOR_KEY] == "x" * MAX_AUTHOR_CHARS
    assert AUTHOR_KEY not in stored(index, "s1-m4").metadata


def test_context_sizes_are_configurable_and_zero_means_none(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS)]
    MemoryWriter(index, embedder, context_before=1, context_after=0).write_messages(WS, records)
    assert stored(index, "s1-m3").metadata[CONTEXT_KEY] == "m2 charlie"

    MemoryWriter(index, embedder, context_before=0, context_after=0).write_messages(WS, records)
    plain = stored(index, "s1-m3")
    assert CONTEXT_KEY not in plain.metadata
    assert plain.vector == pytest.approx(embedder.embed(["m3 delta"])[0], abs=1e-9)


def test_before_and_after_lend_context_without_being_written(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS)]
    MemoryWriter(index, embedder).write_messages(WS, records[2:4], before=records[:2], after=records[4:])

    assert index.count(WS) == 2
    assert stored(index, "s1-m2").metadata[CONTEXT_KEY] == "m0 alpha\nm1 bravo\nm3 delta\nm4 echo"
    assert stored(index, "s1-m3").metadata[CONTEXT_KEY] == "m1 bravo\nm2 charlie\nm4 echo\nm5 foxtrot"


def test_a_long_record_is_chunked_and_every_chunk_names_its_record(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    text = " ".join(f"Sentence number {i} of a long pasted document." for i in range(120))
    result = MemoryWriter(index, embedder).write_messages(WS, [rec(0, text)])

    doc_ids = record_doc_ids("s1-m0", text)
    assert result.docs == len(doc_ids) > 2
    assert doc_ids[0] == "s1-m0" and doc_ids[1] == "s1-m0#1"
    assert index.count(WS) == len(doc_ids)
    hits = index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="sentence document", k=100)).text_hits
    assert {h.doc.id for h in hits} == set(doc_ids)
    assert {h.doc.metadata[RECORD_ID_KEY] for h in hits} == {"s1-m0"}
    assert all(h.doc.vector is not None for h in hits)
    assert "".join(h.doc.text for h in sorted(hits, key=lambda h: int(h.doc.metadata["chunk"]))).startswith(
        "Sentence number 0"
    )
    # Deleting by the ids record_doc_ids gives removes every chunk.
    index.delete(WS, doc_ids)
    assert index.count(WS) == 0


def test_an_embedding_failure_writes_text_only_documents_that_bm25_finds(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, tmp_path: Path
) -> None:
    broken = LocalMiniLM(tmp_path / "no-weights")
    records = [rec(0, "m0 the kayak trip"), rec(1, "m1 pasta night")]
    result = MemoryWriter(index, broken).write_messages(WS, records)

    assert result.embedded == 0
    assert result.text_only == ["s1-m0", "s1-m1"]
    assert result.error is not None and "embedding model unavailable" in result.error
    doc = stored(index, "s1-m0")
    assert doc.vector is None and doc.metadata[EMBEDDING_KEY] == "missing"
    assert (
        MemorySearch(index, memory, embedder).search(WS, "kayak", scope=WORKSPACE_WIDE).hits[0].id == "s1-m0"
    )

    # Written again once the model answers: same ids, now with vectors, the marker gone.
    again = MemoryWriter(index, embedder).write_messages(WS, records)
    assert again.embedded == 2 and index.count(WS) == 2
    fixed = stored(index, "s1-m0")
    assert fixed.vector is not None and EMBEDDING_KEY not in fixed.metadata


def test_no_embedder_means_text_only(index: SqliteMemoryIndex) -> None:
    result = MemoryWriter(index, None).write_messages(WS, [rec(0, "m0 alpha")])
    assert result.text_only == ["s1-m0"] and result.error == "no embedding model configured"


def test_write_docs_embeds_what_has_no_vector_and_keeps_what_has_one(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    own_vector = embedder.embed(["something else entirely"])[0]
    docs = [
        IndexDoc(
            id="sum1", workspace_id=WS, tier="summary", text="sum1 the kayaking summer", session_id="s1"
        ),
        IndexDoc(id="fact1", workspace_id=WS, tier="fact", text="fact1 likes pesto", vector=own_vector),
    ]
    result = MemoryWriter(index, embedder).write_docs(WS, docs)

    assert (result.docs, result.embedded) == (2, 2)
    assert stored(index, "sum1").vector == pytest.approx(
        embedder.embed(["sum1 the kayaking summer"])[0], abs=1e-9
    )
    assert stored(index, "fact1").vector == own_vector


def test_records_of_another_workspace_are_refused(
    index: SqliteMemoryIndex, embedder: HashingEmbedder
) -> None:
    other = rec(0, "m0").model_copy(update={"workspace_id": "ws-other"})
    with pytest.raises(ValueError, match="belongs to workspace"):
        MemoryWriter(index, embedder).write_messages(WS, [other])
    with pytest.raises(ValueError, match="belongs to workspace"):
        MemoryWriter(index, embedder).write_messages(WS, [rec(1, "m1")], before=[other])
    assert index.count(WS) == 0


# ---------------------------------------------------------------- the turn's roll-out


def test_roll_outs_take_the_context_before_from_the_previous_roll_out(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS)]
    tails = RecentTails()
    for start in range(0, 6, 2):
        batch = records[start : start + 2]
        index_rolled_out(index, memory, embedder, batch, records[start + 2 :], tails=tails)
        memory.append_messages(WS, batch)

    # The batch {m2, m3}: m2 has m0 and m1 before it although they were written a turn earlier.
    assert stored(index, "s1-m2").metadata[CONTEXT_KEY] == "m0 alpha\nm1 bravo\nm3 delta\nm4 echo"
    assert stored(index, "s1-m4").metadata[CONTEXT_KEY] == "m2 charlie\nm3 delta\nm5 foxtrot\nm6 golf"


def test_a_process_that_missed_the_previous_roll_out_reads_it_from_the_store(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS)]
    memory.append_messages(WS, records[:4])  # rolled out by another process
    index_rolled_out(index, memory, embedder, records[4:6], records[6:], tails=RecentTails())

    assert stored(index, "s1-m4").metadata[CONTEXT_KEY] == "m2 charlie\nm3 delta\nm5 foxtrot\nm6 golf"


def test_a_retried_roll_out_does_not_take_its_own_records_as_context(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    records = [rec(i, t) for i, t in enumerate(TEXTS[:4])]
    memory.append_messages(WS, records)  # the first attempt's archive landed
    index_rolled_out(index, memory, embedder, records[2:4], tails=RecentTails())

    assert stored(index, "s1-m2").metadata[CONTEXT_KEY] == "m0 alpha\nm1 bravo\nm3 delta"


def test_recent_tails_expire_are_forgotten_and_must_be_contiguous() -> None:
    tails = RecentTails(ttl_s=3600.0)
    tails.put([rec(4, "m4"), rec(5, "m5"), rec(6, "m6")])

    known = tails.get(WS, "s1", 7)
    assert known is not None and [r.seq for r in known] == [5, 6]  # the last two
    assert all(r.message is None for r in known)
    assert tails.get(WS, "s1", 9) is None  # a gap: not the records just before
    assert tails.get(WS, "s2", 7) is None
    tails.forget(WS)
    assert tails.get(WS, "s1", 7) is None

    stale = RecentTails(ttl_s=0.0)
    stale.put([rec(0, "m0")])
    assert stale.get(WS, "s1", 1) is None


def test_the_turn_imports_the_writer_without_numpy() -> None:
    # The agent's cold start imports the writer; numpy (~0.3 s) waits for the first vectors.
    code = "import sys, shared.agent.turn; print('numpy' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
