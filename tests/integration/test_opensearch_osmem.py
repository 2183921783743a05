"""OpenSearchIndex over real HTTP against osmem-server, an in-memory OpenSearch-compatible server.

osmem-server (PyPI) ships a static binary; `OsmemServer.start` launches it on 127.0.0.1 with a
free port, reads the URL it prints, and the process exits when stdin closes or this process dies.
It serves BM25, filters, routing, _bulk, _msearch and _count, and accepts the knn_vector mapping,
but answers every `knn` query with an error: the k-NN path is checked at the wire level in
tests/unit/test_opensearch_requests.py, and here only for the clear error it must produce.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from opensearchpy import OpenSearch

from shared.adapters.aws.opensearch import (
    IndexSizing,
    OpenSearchIndex,
    OpenSearchIndexError,
    index_body,
)
from shared.memory.search import CONTEXT_KEY
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery, MemoryScope, RecallScope

DIM = 4


def _doc(ws: str, doc_id: str, text: str, **kw: Any) -> IndexDoc:
    kw.setdefault("tier", "message")
    return IndexDoc(id=doc_id, workspace_id=ws, text=text, **kw)


def _ids(hits: list[Any]) -> list[str]:
    return [h.doc.id for h in hits]


def test_index_is_created_on_first_use_with_the_expected_mapping(
    index: OpenSearchIndex, client: OpenSearch
) -> None:
    assert not client.indices.exists(index=index.index)
    assert index.count("ws1") == 0
    mapping = client.indices.get_mapping(index=index.index)[index.index]["mappings"]
    props = mapping["properties"]
    assert props["vector"]["type"] == "knn_vector" and props["vector"]["dimension"] == DIM
    assert props["vector"]["method"]["space_type"] == "cosinesimil"
    assert props["workspace_id"]["type"] == "keyword" and props["text"]["analyzer"] == "english"
    settings = client.indices.get_settings(index=index.index)[index.index]["settings"]["index"]
    assert settings["knn"] == "true"
    # A second adapter (another Lambda container) finds the index and leaves it alone.
    again = OpenSearchIndex(client=client, index=index.index, dimension=DIM)
    assert again.count("ws1") == 0


def test_bm25_ranks_the_document_with_the_distinctive_term_first(index: OpenSearchIndex) -> None:
    index.upsert(
        "ws1",
        [
            _doc("ws1", "a", "we talked about the weather and lunch plans"),
            _doc("ws1", "b", "the kubernetes cluster failed over during the deploy"),
            _doc("ws1", "c", "the deploy went fine after lunch"),
        ],
    )
    result = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="kubernetes deploy", k=10))
    assert _ids(result.text_hits)[0] == "b"
    assert set(_ids(result.text_hits)) == {"b", "c"}
    assert result.text_hits[0].score > result.text_hits[1].score
    assert result.vector_hits == []
    # The english analyser stems: "deploying" finds "deploy".
    assert set(_ids(index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="deploying")).text_hits)) == {
        "b",
        "c",
    }


def test_k_limits_the_hits(index: OpenSearchIndex) -> None:
    index.upsert("ws1", [_doc("ws1", f"d{i}", f"note number {i} about tea") for i in range(6)])
    assert len(index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="tea", k=4)).text_hits) == 4


def test_workspaces_with_the_same_doc_ids_never_meet(index: OpenSearchIndex) -> None:
    index.upsert("ws-a", [_doc("ws-a", "d1", "alpha secret plan"), _doc("ws-a", "d2", "shared words")])
    index.upsert("ws-b", [_doc("ws-b", "d1", "beta secret plan"), _doc("ws-b", "d2", "shared words")])

    assert index.count("ws-a") == 2
    assert index.count("ws-b") == 2
    a_hits = index.search(
        "ws-a", IndexQuery(scope=WORKSPACE_WIDE, text="secret plan shared words beta")
    ).text_hits
    assert {(h.doc.workspace_id, h.doc.id) for h in a_hits} == {("ws-a", "d1"), ("ws-a", "d2")}
    assert index.search("ws-a", IndexQuery(scope=WORKSPACE_WIDE, text="beta")).text_hits == []

    index.delete("ws-a", ["d1"])
    assert index.count("ws-a") == 1
    assert index.count("ws-b") == 2
    assert _ids(index.search("ws-b", IndexQuery(scope=WORKSPACE_WIDE, text="secret")).text_hits) == ["d1"]


def test_tier_and_session_filters(index: OpenSearchIndex) -> None:
    index.upsert(
        "ws1",
        [
            _doc("ws1", "m1", "invoice paid", tier="message", session_id="s1"),
            _doc("ws1", "m2", "invoice overdue", tier="message", session_id="s2"),
            _doc("ws1", "s1", "invoice summary", tier="summary", session_id="s1"),
            _doc("ws1", "f1", "invoice fact", tier="fact"),
        ],
    )
    by_tier = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="invoice", tiers=["summary", "fact"]))
    assert set(_ids(by_tier.text_hits)) == {"s1", "f1"}
    by_session = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="invoice", session_id="s1"))
    assert set(_ids(by_session.text_hits)) == {"m1", "s1"}
    both = index.search(
        "ws1", IndexQuery(scope=WORKSPACE_WIDE, text="invoice", session_id="s1", tiers=["message"])
    )
    assert _ids(both.text_hits) == ["m1"]


def test_upsert_replaces_a_document(index: OpenSearchIndex) -> None:
    index.upsert("ws1", [_doc("ws1", "d1", "original wording")])
    index.upsert("ws1", [_doc("ws1", "d1", "rewritten entirely", tier="summary")])
    assert index.count("ws1") == 1
    assert index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="original")).text_hits == []
    (hit,) = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="rewritten")).text_hits
    assert hit.doc.tier == "summary"


def test_delete_and_count(index: OpenSearchIndex) -> None:
    index.upsert("ws1", [_doc("ws1", f"d{i}", f"entry {i}") for i in range(3)])
    assert index.count("ws1") == 3
    index.delete("ws1", ["d0", "d2", "never-there"])
    assert index.count("ws1") == 1
    assert _ids(index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="entry")).text_hits) == ["d1"]
    index.delete("ws1", [])
    assert index.count("ws2") == 0


def test_hits_carry_the_document_back(index: OpenSearchIndex) -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    doc = _doc(
        "ws1",
        "d1",
        "round trip",
        tier="fact",
        session_id="s9",
        created_at=at,
        metadata={"source": "chat"},
        vector=[1, 0, 0, 0],
    )
    index.upsert("ws1", [doc])
    (hit,) = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="round trip")).text_hits
    assert hit.doc == doc


def test_a_refused_document_is_named_and_the_others_are_kept(
    index: OpenSearchIndex, client: OpenSearch
) -> None:
    # An index left behind with an incompatible mapping: session ids that are not numbers fail.
    body = index_body(dimension=DIM)
    body["mappings"]["properties"]["session_id"] = {"type": "integer"}
    client.indices.create(index=index.index, body=body)
    docs = [_doc("ws1", "good", "fine"), _doc("ws1", "bad", "broken", session_id="s-1")]
    with pytest.raises(
        OpenSearchIndexError, match=r"1 of 2 documents failed to index .* ws1:bad \[400\]"
    ) as e:
        index.upsert("ws1", docs)
    assert [f["_id"] for f in e.value.failures] == ["ws1:bad"]
    assert index.count("ws1") == 1


def test_knn_query_on_osmem_fails_clearly(index: OpenSearchIndex) -> None:
    index.upsert("ws1", [_doc("ws1", "d1", "vectors are stored", vector=[0.5, 0.5, 0.0, 0.0])])
    with pytest.raises(OpenSearchIndexError, match="knn"):
        index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="vectors", vector=[1, 0, 0, 0]))


def test_knn_off_creates_a_plain_index_and_refuses_vector_queries(client: OpenSearch) -> None:
    plain = OpenSearchIndex(client=client, index=f"plain-{uuid.uuid4().hex[:12]}", dimension=DIM, knn=False)
    plain.upsert("ws1", [_doc("ws1", "d1", "text only please", vector=[1, 0, 0, 0])])
    mapping = client.indices.get_mapping(index=plain.index)[plain.index]["mappings"]["properties"]
    assert "vector" not in mapping
    assert "knn" not in client.indices.get_settings(index=plain.index)[plain.index]["settings"]["index"]
    assert _ids(plain.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="text")).text_hits) == ["d1"]
    with pytest.raises(OpenSearchIndexError, match="knn=False"):
        plain.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="text", vector=[1, 0, 0, 0]))


def test_an_existing_index_with_another_dimension_is_refused(
    index: OpenSearchIndex, client: OpenSearch
) -> None:
    index.ensure_index()
    other = OpenSearchIndex(client=client, index=index.index, dimension=DIM * 2)
    with pytest.raises(OpenSearchIndexError, match=f"dimension {DIM}, expected {DIM * 2}"):
        other.count("ws1")


# ---------------------------------------------------------------- context, missing vectors


def test_a_document_is_found_by_its_context_below_one_found_by_its_own_text(
    index: OpenSearchIndex, client: OpenSearch
) -> None:
    # The memory writer's shape: an answer that shares no word with its question, which is its
    # context. The context is a field of its own, and hits give it back in metadata as written.
    answer = _doc("ws1", "answer", "yes, twice a week", metadata={"role": "user", CONTEXT_KEY: "do you swim"})
    question = _doc("ws1", "question", "do you swim", metadata={"role": "assistant"})
    other = _doc("ws1", "other", "the weather is fine", metadata={CONTEXT_KEY: "nothing about water"})
    index.upsert("ws1", [answer, question, other])
    mapping = client.indices.get_mapping(index=index.index)[index.index]["mappings"]["properties"]
    assert mapping["context"]["type"] == "text"
    source = client.get(index=index.index, id="ws1:answer", routing="ws1")["_source"]
    assert source["context"] == "do you swim" and CONTEXT_KEY not in source["metadata"]

    hits = index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="swim", k=10)).text_hits
    # Found through its context alone, ranked below the document whose own text matches (0.5).
    assert _ids(hits) == ["question", "answer"]
    assert hits[1].doc == answer and hits[1].score < hits[0].score


def test_an_index_made_before_the_context_field_gets_it(index: OpenSearchIndex, client: OpenSearch) -> None:
    body = index_body(dimension=DIM)
    del body["mappings"]["properties"]["context"]
    client.indices.create(index=index.index, body=body)
    index.upsert("ws1", [_doc("ws1", "a", "yes", metadata={CONTEXT_KEY: "tea or coffee"})])
    assert _ids(index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="coffee")).text_hits) == ["a"]


def test_missing_vectors_lists_a_tier_s_documents_without_a_vector_oldest_first(
    index: OpenSearchIndex,
) -> None:
    def at(minute: int) -> datetime:
        return datetime(2026, 1, 1, 0, minute, tzinfo=UTC)

    index.upsert(
        "ws1",
        [
            _doc("ws1", "late", "text only", created_at=at(5), metadata={"embedding": "missing"}),
            _doc("ws1", "early", "text only", created_at=at(1), metadata={"embedding": "missing"}),
            _doc("ws1", "embedded", "has one", created_at=at(0), vector=[1, 0, 0, 0]),
            _doc("ws1", "fact", "text only", tier="fact", created_at=at(0)),
        ],
    )
    index.upsert("ws2", [_doc("ws2", "theirs", "text only", created_at=at(0))])
    assert [d.id for d in index.missing_vectors("ws1")] == ["early", "late"]
    assert [d.id for d in index.missing_vectors("ws1", limit=1)] == ["early"]
    assert [d.id for d in index.missing_vectors("ws1", tier="fact")] == ["fact"]
    index.upsert("ws1", [_doc("ws1", "early", "text only", created_at=at(1), vector=[0, 1, 0, 0])])
    assert [d.id for d in index.missing_vectors("ws1")] == ["late"]


# ---------------------------------------------------------------- scopes


def test_search_returns_only_the_documents_the_scope_admits(index: OpenSearchIndex) -> None:
    mine = MemoryScope(conversation="telegram.dm-u1", users=("u1",))
    group = MemoryScope(conversation="slack.team", users=("u2",), group=True)
    shared = MemoryScope(conversation="slack.team", users=("u2",), group=True, shared=True)
    index.upsert(
        "ws1",
        [
            _doc("ws1", "mine", "invoice one", session_id="telegram.dm-u1", scope=mine),
            _doc("ws1", "group", "invoice two", session_id="slack.team", scope=group),
            _doc("ws1", "shared", "invoice three", session_id="slack.team", scope=shared),
            _doc("ws1", "legacy", "invoice four", session_id="telegram.dm-u1"),
            _doc("ws1", "elsewhere", "invoice five", session_id="slack.other"),
        ],
    )

    def found(scope: RecallScope, k: int = 10) -> set[str]:
        return set(_ids(index.search("ws1", IndexQuery(text="invoice", k=k, scope=scope)).text_hits))

    # u1 in another direct session: their own record and the shared one; not the group's, and
    # not the record written before scopes (its own session only).
    personal = RecallScope(session_id="telegram.dm-u1.new", users=("u1",), shared=True)
    assert found(personal) == {"mine", "shared"}
    # In their own session, the legacy record too.
    assert found(RecallScope(session_id="telegram.dm-u1", users=("u1",), shared=True)) == {
        "mine",
        "shared",
        "legacy",
    }
    assert found(RecallScope(session_id="slack.team.t1", conversation="slack.team", shared=True)) == {
        "group",
        "shared",
    }
    assert found(RecallScope(session_id="slack.other")) == {"elsewhere"}
    assert len(found(WORKSPACE_WIDE)) == 5
    # k smaller than the workspace: the k come from what is visible, not cut from all five.
    assert len(found(personal, k=2)) == 2


def test_stamp_scopes_sets_the_scope_of_a_record_and_its_chunks(index: OpenSearchIndex) -> None:
    index.upsert(
        "ws1",
        [
            _doc("ws1", "r1", "long note part one", session_id="s1"),
            _doc("ws1", "r1#1", "long note part two", session_id="s1", metadata={"record_id": "r1"}),
            _doc("ws1", "r2", "another note", session_id="s2"),
        ],
    )
    index.upsert("ws2", [_doc("ws2", "r1", "note of another workspace", session_id="s1")])
    reader = RecallScope(session_id="s9", users=("u1",))
    assert index.search("ws1", IndexQuery(text="note", scope=reader)).text_hits == []

    owner = MemoryScope(conversation="s1", users=("u1",))
    assert index.stamp_scopes("ws1", {"r1": owner}) == 2
    hits = index.search("ws1", IndexQuery(text="note", scope=reader)).text_hits
    assert set(_ids(hits)) == {"r1", "r1#1"} and all(h.doc.scope == owner for h in hits)
    assert hits[0].doc.text.startswith("long note")  # a partial update: the text is kept
    # Already stamped: nothing changes. Another workspace's r1 is untouched.
    assert index.stamp_scopes("ws1", {"r1": owner, "unknown": owner}) == 0
    theirs = index.search("ws2", IndexQuery(text="note", scope=WORKSPACE_WIDE)).text_hits
    assert [h.doc.scope for h in theirs] == [None]


def test_an_index_made_before_scopes_gets_the_scope_fields(
    index: OpenSearchIndex, client: OpenSearch
) -> None:
    body = index_body(dimension=DIM)
    del body["mappings"]["properties"]["scope"]
    client.indices.create(index=index.index, body=body)
    scope = MemoryScope(conversation="c1", users=("u1",))
    index.upsert("ws1", [_doc("ws1", "a", "tea", scope=scope)])
    props = client.indices.get_mapping(index=index.index)[index.index]["mappings"]["properties"]
    assert props["scope"]["properties"]["users"]["type"] == "keyword"
    assert props["scope"]["properties"]["shared"]["type"] == "boolean"
    hits = index.search("ws1", IndexQuery(text="tea", scope=RecallScope(users=("u1",)))).text_hits
    assert _ids(hits) == ["a"] and hits[0].doc.scope == scope


def test_a_partitioned_index_keeps_every_workspace_whole_and_apart(client: OpenSearch) -> None:
    # Given an index whose workspaces each spread over 2 of 3 shards (issue 30)
    index = OpenSearchIndex(
        client=client, index=f"mem-{uuid.uuid4().hex[:12]}", dimension=DIM, sizing=IndexSizing(3, 2)
    )
    # When two workspaces write documents of the same ids
    index.upsert("ws-a", [_doc("ws-a", f"d{n}", f"alpha note {n}") for n in range(20)])
    index.upsert("ws-b", [_doc("ws-b", f"d{n}", f"beta note {n}") for n in range(5)])
    # Then the index was created with the sizing, and each workspace reads, counts and deletes
    # all of its own documents and none of the other's
    settings = client.indices.get_settings(index=index.index)[index.index]["settings"]["index"]
    assert (str(settings["number_of_shards"]), str(settings["routing_partition_size"])) == ("3", "2")
    assert (index.count("ws-a"), index.count("ws-b")) == (20, 5)
    hits = index.search("ws-a", IndexQuery(scope=WORKSPACE_WIDE, text="note", k=50)).text_hits
    assert {h.doc.id for h in hits} == {f"d{n}" for n in range(20)}
    assert {h.doc.workspace_id for h in hits} == {"ws-a"}
    index.delete("ws-a", [f"d{n}" for n in range(10)])
    assert (index.count("ws-a"), index.count("ws-b")) == (10, 5)
    # And the measured sizes name the larger workspace first
    assert index.measure(largest=2) == (15, {"ws-a": 10, "ws-b": 5})
