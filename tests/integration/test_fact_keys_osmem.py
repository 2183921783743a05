"""Fact-augmented keys and summaries pointing to their messages on the OpenSearch adapter, over
real HTTP against osmem-server (BM25 only: osmem answers no k-NN query), with a SQLite memory
store: the `facts` field is mapped, matched and given back in metadata; a changed or dropped fact
leaves no text; scopes filter; a summary hit brings its messages."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from shared.adapters.aws.opensearch import OpenSearchIndex, index_body
from shared.adapters.embedded import Database, SqliteMemoryStore
from shared.memory.fact_keys import attach_fact_keys, drop_fact_keys
from shared.memory.scope import owner_scope, recall_scope
from shared.memory.search import FACTS_KEY, MemorySearch
from shared.memory.writer import MemoryWriter, summary_doc
from shared.models import WORKSPACE_WIDE, MemoryRecord, RecallScope, Summary, Triple
from tests.contract.builders import at, user_records
from tests.support.hashing_embedder import HashingEmbedder

DIM = 4
WS = "ws-facts"
SCOPE = owner_scope("telegram.100", ["ada"], group=False)
TEXTS = [
    "I signed up for the pottery class",
    "Nice! When does it start?",
    "Next Tuesday evening",
    "Sounds good",
]


@pytest.fixture
def memory(tmp_path: pathlib.Path) -> Iterator[SqliteMemoryStore]:
    db = Database(tmp_path / "sigil.db")
    yield SqliteMemoryStore(db)
    db.close()


@pytest.fixture
def written(index: OpenSearchIndex, memory: SqliteMemoryStore) -> MemoryWriter:
    writer = MemoryWriter(index, HashingEmbedder(DIM))
    records = user_records(WS, TEXTS, user_id="ada", scope=SCOPE)
    memory.append_messages(WS, records)
    writer.write_messages(WS, records)
    return writer


def _fact(obj: str, fact_id: str = "f1") -> Triple:
    return Triple(
        id=fact_id,
        workspace_id=WS,
        subject="ada",
        predicate="hobby",
        object=obj,
        session_id="s1",
        message_ids=["r0"],
        scope=SCOPE,
    )


def _found(
    index: OpenSearchIndex,
    memory: SqliteMemoryStore,
    query: str,
    scope: RecallScope = WORKSPACE_WIDE,
    **kw: object,
) -> list[str]:
    search = MemorySearch(index, memory, None, **kw)  # type: ignore[arg-type]
    return [h.id for h in search.search(WS, query, scope=scope, tiers=["message"], mode="bm25").hits]


def test_the_facts_field_finds_a_message_and_a_dropped_fact_leaves_nothing(
    index: OpenSearchIndex, memory: SqliteMemoryStore, written: MemoryWriter, client: OpenSearch
) -> None:
    assert _found(index, memory, "ceramics") == []
    result = attach_fact_keys(
        index, memory, written._embedder, WS, [_fact("ceramics workshop")], writer=written
    )
    assert result.records == 1 and result.pending == []
    mapping = client.indices.get_mapping(index=index.index)[index.index]["mappings"]["properties"]
    assert mapping["facts"]["type"] == "text"
    source = client.get(index=index.index, id=f"{WS}:r0", routing=WS)["_source"]
    assert source["facts"] == "ada hobby: ceramics workshop" and FACTS_KEY not in source["metadata"]
    [doc] = index.get_docs(WS, ["r0"])
    assert doc.metadata[FACTS_KEY] == "ada hobby: ceramics workshop" and doc.scope == SCOPE
    assert _found(index, memory, "ceramics") == ["r0"]

    attach_fact_keys(index, memory, None, WS, [_fact("glazing course")], writer=written)
    assert _found(index, memory, "ceramics") == []
    drop_fact_keys(index, memory, None, WS, gone=[_fact("glazing course")], writer=written)
    assert _found(index, memory, "glazing") == []
    assert _found(index, memory, "pottery")[0] == "r0"


def test_scopes_filter_a_message_found_by_its_fact(
    index: OpenSearchIndex, memory: SqliteMemoryStore, written: MemoryWriter
) -> None:
    attach_fact_keys(index, memory, None, WS, [_fact("ceramics workshop")], writer=written)
    ada = recall_scope(
        "personal", session_id="s1", conversation="telegram.100", group=False, user_aliases=("ada",)
    )
    bob = recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=("bob",)
    )
    assert _found(index, memory, "ceramics", ada) == ["r0"]
    assert _found(index, memory, "ceramics", bob) == []


def test_a_summary_hit_brings_its_messages(
    index: OpenSearchIndex, memory: SqliteMemoryStore, written: MemoryWriter
) -> None:
    summary = Summary(
        id="sum",
        workspace_id=WS,
        session_id="s1",
        text="Ada booked a kiln",
        first_seq=1,
        last_seq=2,
        start_at=at(1),
        end_at=at(2),
        scope=SCOPE,
    )
    memory.put_summary(summary)
    written.write_docs(WS, [summary_doc(summary)])
    assert _found(index, memory, "kiln") == []
    assert set(_found(index, memory, "kiln", summary_weight=0.5, summary_bring_in=True)) == {"r1", "r2"}


def test_an_index_made_before_the_facts_field_gets_it(
    index: OpenSearchIndex, client: OpenSearch, memory: SqliteMemoryStore
) -> None:
    body = index_body(dimension=DIM)
    del body["mappings"]["properties"]["facts"]
    client.indices.create(index=index.index, body=body)
    writer = MemoryWriter(index, None)
    record = MemoryRecord(
        id="r0",
        workspace_id=WS,
        session_id="s1",
        role="user",
        text="yes",
        seq=0,
        created_at=at(0),
        scope=SCOPE,
    )
    memory.append_messages(WS, [record])
    writer.write_messages(WS, [record])
    attach_fact_keys(index, memory, None, WS, [_fact("tea over coffee")], writer=writer)
    assert _found(index, memory, "coffee") == ["r0"]
