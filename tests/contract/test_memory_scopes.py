"""Memory scopes under random workloads (property tests): each adapter's own query admits exactly
what shared.memory.scope.visible admits.

Hypothesis generates workspaces where three users talk to the bot in direct conversations and in
group conversations (a group's main session and one of its threads) on two channels: messages,
summaries and facts, each with the MemoryScope the writer gives it (some facts marked shared, some
records written before scopes existed, some facts no longer active). Then every user reads from
every seat they have (each session of each conversation they are part of) under the three
policies (shared.memory.scope.recall_scope): the ids each read returns must be exactly the set
`visible()` admits among what was written, and a read capped at a small limit or k must still
come back full (the filter is in the query, not applied to a page afterwards). Under the default
personal policy, no read ever returns a record of a conversation the asker was not part of,
unless the workspace marked it shared.

Adapters: the MemoryStore of each contract set (SQLite; DynamoDB on moto, whose FilterExpression
reads on until the limit), the SQLite index (its in-memory copy and its SQL path: FTS5 and
sqlite-vec), and the OpenSearch adapter on osmem-server: BM25 through the adapter, and the k-NN
query's own `filter`, taken from the _msearch request the adapter sent and run by osmem as a
filter query (osmem answers no k-NN query itself).

The number of workloads generated and reads checked is printed at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from opensearchpy import OpenSearch
from osmem_server import OsmemServer

from shared.adapters.aws.opensearch import OpenSearchIndex, OpenSearchIndexError, opensearch_client
from shared.adapters.embedded import Database, SqliteMemoryIndex
from shared.memory.scope import owner_scope, recall_scope, visible
from shared.models import (
    WORKSPACE_WIDE,
    IndexDoc,
    IndexQuery,
    IndexResult,
    MemoryRecord,
    MemoryScope,
    MemoryTier,
    RecallPolicy,
    RecallScope,
    Summary,
    Triple,
)
from shared.ports import MemoryIndex, MemoryStore

from .factories import CONTRACT_VECTOR_DIM, ContractBackend

# Read by tests/contract/conftest.py's terminal summary: workloads generated and reads checked.
COUNTS: Counter[str] = Counter()

USERS = ("u1", "u2", "u3")
CHANNELS = ("telegram", "slack")
POLICIES: tuple[RecallPolicy, ...] = ("personal", "workspace", "conversation")
SUBJECTS = ("ada", "bob")
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
DIM = CONTRACT_VECTOR_DIM
# DynamoDB on moto answers a Query in a few milliseconds: fewer workloads there keep the file
# within a minute on a loaded two-core machine.
EXAMPLES = {"SqliteMemoryStore": 25, "DynamoMemoryStore": 8, "index": 25, "opensearch": 20}
SETTINGS = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Conversation:
    key: str
    group: bool
    members: tuple[str, ...]

    @property
    def sessions(self) -> tuple[str, ...]:
        # A group has its main session and a thread (a session of its own, the same conversation).
        return (self.key, f"{self.key}.t1") if self.group else (self.key,)


@dataclass(frozen=True)
class Written:
    id: str
    tier: MemoryTier
    session_id: str
    conversation: str
    writer: str
    scope: MemoryScope | None
    subject: str
    active: bool

    @property
    def shared(self) -> bool:
        return self.scope is not None and self.scope.shared


@dataclass(frozen=True)
class Seat:
    user: str
    session_id: str
    conversation: Conversation


@dataclass
class Workload:
    conversations: list[Conversation]
    records: list[Written]

    def seats(self) -> Iterator[Seat]:
        for user in USERS:
            for conv in self.conversations:
                if user in conv.members:
                    for session_id in conv.sessions:
                        yield Seat(user, session_id, conv)

    def members_of(self, conversation: str) -> tuple[str, ...]:
        return next(c.members for c in self.conversations if c.key == conversation)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    conversations: list[Conversation] = []
    for channel in CHANNELS:
        conversations += [Conversation(f"{channel}.dm-{u}", False, (u,)) for u in USERS]
        for g in range(draw(st.integers(1, 2))):
            members = draw(st.sets(st.sampled_from(USERS), min_size=2, max_size=3))
            conversations.append(Conversation(f"{channel}.g{g}", True, tuple(sorted(members))))
    records: list[Written] = []
    for n in range(draw(st.integers(1, 18))):
        conv = draw(st.sampled_from(conversations))
        session_id = draw(st.sampled_from(conv.sessions))
        writer = draw(st.sampled_from(conv.members))
        tier: MemoryTier = draw(st.sampled_from(["message", "summary", "fact"]))
        legacy = draw(st.integers(0, 7)) == 0  # written before scopes existed
        shared = tier == "fact" and draw(st.integers(0, 3)) == 0
        scope = None if legacy else owner_scope(conv.key, [writer], group=conv.group, shared=shared)
        records.append(
            Written(
                id=f"r{n:02d}",
                tier=tier,
                session_id=session_id,
                conversation=conv.key,
                writer=writer,
                scope=scope,
                subject=draw(st.sampled_from(SUBJECTS)),
                active=tier != "fact" or draw(st.integers(0, 4)) > 0,
            )
        )
    return Workload(conversations, records)


def scopes_of(seat: Seat) -> Iterator[tuple[RecallPolicy, RecallScope]]:
    for policy in POLICIES:
        yield (
            policy,
            recall_scope(
                policy,
                session_id=seat.session_id,
                conversation=seat.conversation.key,
                group=seat.conversation.group,
                user_aliases=[seat.user],
            ),
        )


def expected(workload: Workload, scope: RecallScope, tier: MemoryTier | None = None) -> set[str]:
    return {
        r.id
        for r in workload.records
        if (tier is None or r.tier == tier) and visible(scope, r.session_id, r.scope)
    }


def check_personal(workload: Workload, seat: Seat, policy: RecallPolicy, ids: set[str]) -> None:
    """Under the personal policy: nothing of a conversation the asker was not part of, unless shared."""
    if policy != "personal":
        return
    by_id = {r.id: r for r in workload.records}
    foreign = {
        i for i in ids if seat.user not in workload.members_of(by_id[i].conversation) and not by_id[i].shared
    }
    assert not foreign, f"{seat.user} in {seat.session_id} recalled {foreign} of others' conversations"


def vector_of(record_id: str) -> list[float]:
    rng = np.random.default_rng(int(record_id[1:]) + 1)
    return [float(x) for x in rng.standard_normal(DIM) + 0.1]


# ---------------------------------------------------------------- MemoryStore


def _write_store(memory: MemoryStore, ws: str, workload: Workload) -> None:
    seqs: Counter[str] = Counter()
    for i, r in enumerate(workload.records):
        when = T0 + timedelta(minutes=i)
        if r.tier == "message":
            memory.append_messages(
                ws,
                [
                    MemoryRecord(
                        id=r.id,
                        workspace_id=ws,
                        session_id=r.session_id,
                        role="user",
                        text=f"memo {r.id}",
                        seq=seqs[r.session_id],
                        created_at=when,
                        user_id=r.writer,
                        scope=r.scope,
                    )
                ],
            )
            seqs[r.session_id] += 1
        elif r.tier == "summary":
            memory.put_summary(
                Summary(
                    id=r.id,
                    workspace_id=ws,
                    session_id=r.session_id,
                    text=f"memo {r.id}",
                    first_seq=0,
                    last_seq=1,
                    start_at=when,
                    end_at=when + timedelta(seconds=30),
                    user_id=r.writer,
                    scope=r.scope,
                )
            )
    memory.put_triples(
        ws,
        [
            Triple(
                id=r.id,
                workspace_id=ws,
                subject=r.subject,
                predicate="likes",
                object=f"thing {r.subject}",
                session_id=r.session_id,
                user_id=r.writer,
                scope=r.scope,
                status="active" if r.active else "merged",
                updated_at=T0 + timedelta(minutes=i),
            )
            for i, r in enumerate(workload.records)
            if r.tier == "fact"
        ],
    )


def test_store_reads_admit_exactly_what_visible_admits(contract: ContractBackend) -> None:
    memory = contract.backend.memory

    # No shrinking on moto: a failing workload is reported as found (seat and policy in the
    # message) rather than after minutes of re-running smaller ones at a few ms a Query.
    slow = type(memory).__name__ == "DynamoMemoryStore"
    phases = [Phase.explicit, Phase.reuse, Phase.generate] if slow else list(Phase)

    @given(workload=workloads())
    @settings(SETTINGS, max_examples=EXAMPLES[type(memory).__name__], phases=phases)
    def run(workload: Workload) -> None:
        ws = f"scopes-{uuid.uuid4().hex[:10]}"
        _write_store(memory, ws, workload)
        COUNTS[f"store[{type(memory).__name__}] workloads"] += 1
        COUNTS[f"store[{type(memory).__name__}] reads"] += check_store_reads(memory, ws, workload)

    run()


def check_store_reads(memory: MemoryStore, ws: str, workload: Workload) -> int:
    reads = 0
    for n, seat in enumerate(workload.seats()):
        for policy, scope in scopes_of(seat):
            summaries = expected(workload, scope, "summary")
            got = [s.id for s in memory.list_summaries(ws, scope=scope, limit=1000)]
            assert set(got) == summaries and len(got) == len(summaries), (seat, policy)
            capped = memory.list_summaries(ws, scope=scope, limit=1)
            assert len(capped) == min(1, len(summaries)) and {s.id for s in capped} <= summaries

            facts = expected(workload, scope, "fact")
            listed = {t.id for t in memory.list_triples(ws, scope=scope)}
            assert listed == facts, (seat, policy)
            check_personal(workload, seat, policy, listed)
            # One subject per seat, in turn: both keys of the fact tier, and a capped lookup.
            subject = SUBJECTS[n % len(SUBJECTS)]
            active = {r.id for r in workload.records if r.id in facts and r.active and r.subject == subject}
            by_subject = {t.id for t in memory.triples_by_subject(ws, subject, scope=scope)}
            by_object = {t.id for t in memory.triples_by_object(ws, f"thing {subject}", scope=scope)}
            assert by_subject == active and by_object == active, (seat, policy, subject)
            capped_facts = memory.triples_by_subject(ws, subject, scope=scope, limit=1)
            assert len(capped_facts) == min(1, len(active))
            check_personal(workload, seat, policy, set(got))
            reads += 6
    return reads


# ---------------------------------------------------------------- MemoryIndex


def _index_docs(ws: str, workload: Workload) -> list[IndexDoc]:
    return [
        IndexDoc(
            id=r.id,
            workspace_id=ws,
            session_id=r.session_id,
            tier=r.tier,
            text=f"memo {r.id}",
            vector=vector_of(r.id),
            created_at=T0,
            scope=r.scope,
        )
        for r in workload.records
    ]


def check_index_reads(
    index: MemoryIndex, ws: str, workload: Workload, name: str, *, vectors: bool = True
) -> int:
    reads = 0
    for seat in workload.seats():
        for policy, scope in scopes_of(seat):
            want = expected(workload, scope)
            vector = vector_of("r99") if vectors else None
            result = index.search(ws, IndexQuery(text="memo", vector=vector, k=1000, scope=scope))
            text_ids = {h.doc.id for h in result.text_hits}
            assert text_ids == want and len(result.text_hits) == len(want), (name, seat, policy)
            check_personal(workload, seat, policy, text_ids)
            reads += 1
            if vectors:
                vector_ids = {h.doc.id for h in result.vector_hits}
                assert vector_ids == want, (name, seat, policy)
                reads += 1
            # k smaller than what is visible: still k hits, every one of them visible.
            capped = index.search(ws, IndexQuery(text="memo", vector=vector, k=2, scope=scope))
            for hits in [capped.text_hits, *([capped.vector_hits] if vectors else [])]:
                assert len(hits) == min(2, len(want)) and {h.doc.id for h in hits} <= want, (name, seat)
                reads += 1
    return reads


IndexKind = Literal["cached", "sql"]


@pytest.fixture(params=["cached", "sql"])
def sqlite_index(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, SqliteMemoryIndex]]:
    db = Database(tmp_path / "index.db", load_vec=True)
    # "sql": no in-memory copy, so FTS5 and sqlite-vec answer (the path of a workspace too large
    # for the copy).
    kind: IndexKind = request.param
    yield kind, SqliteMemoryIndex(db, cache_max_docs=0 if kind == "sql" else 100_000)
    db.close()


@given(workload=workloads())
@settings(SETTINGS, max_examples=EXAMPLES["index"])
def test_sqlite_index_search_admits_exactly_what_visible_admits(
    sqlite_index: tuple[str, SqliteMemoryIndex], workload: Workload
) -> None:
    kind, index = sqlite_index
    ws = f"scopes-{uuid.uuid4().hex[:10]}"
    index.upsert(ws, _index_docs(ws, workload))
    name = f"index[sqlite-{kind}]"
    COUNTS[f"{name} workloads"] += 1
    COUNTS[f"{name} reads"] += check_index_reads(index, ws, workload, name)


# ---------------------------------------------------------------- OpenSearch on osmem-server


@dataclass
class Sent:
    """The _msearch bodies the adapter's client sent (the real client, over real HTTP)."""

    bodies: list[list[dict[str, Any]]]


@pytest.fixture(scope="module")
def opensearch(osmem: OsmemServer) -> tuple[OpenSearchIndex, OpenSearch, Sent]:
    client = opensearch_client.__wrapped__(osmem.url)
    sent = Sent([])
    perform = client.transport.perform_request

    def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if url.endswith("/_msearch"):
            body = kwargs.get("body")
            text = body.decode() if isinstance(body, bytes) else str(body)
            sent.bodies.append([json.loads(line) for line in text.splitlines() if line.strip()])
        return perform(method, url, *args, **kwargs)

    client.transport.perform_request = recording  # type: ignore[method-assign]
    index = OpenSearchIndex(client=client, index=f"scopes-{uuid.uuid4().hex[:8]}", dimension=DIM)
    return index, client, sent


@given(workload=workloads())
@settings(SETTINGS, max_examples=EXAMPLES["opensearch"])
def test_opensearch_queries_admit_exactly_what_visible_admits(
    opensearch: tuple[OpenSearchIndex, OpenSearch, Sent], workload: Workload
) -> None:
    index, client, sent = opensearch
    ws = f"scopes-{uuid.uuid4().hex[:10]}"
    index.upsert(ws, _index_docs(ws, workload))
    COUNTS["index[opensearch-bm25] workloads"] += 1
    COUNTS["index[opensearch-bm25] reads"] += check_index_reads(
        index, ws, workload, "opensearch", vectors=False
    )
    # k-NN: osmem answers no knn query, so the query's own filter (what OpenSearch applies before
    # ranking) is taken from the request and run by osmem as a plain filter over the workspace.
    knn_reads = 0
    for seat in workload.seats():
        for policy, scope in scopes_of(seat):
            sent.bodies.clear()
            # OpenSearchIndexError: osmem's answer to any knn query; the request is what is checked.
            with contextlib.suppress(OpenSearchIndexError):
                index.search(ws, IndexQuery(vector=vector_of("r99"), k=1000, scope=scope))
            want = expected(workload, scope)
            if not sent.bodies:
                assert want == set(), (seat, policy)  # a scope admitting nothing sends nothing
                knn_reads += 1
                continue
            (_, knn_body) = sent.bodies[0]
            knn_filter = knn_body["query"]["knn"]["vector"]["filter"]
            found = client.search(
                index=index.index,
                body={"size": 1000, "query": {"bool": {"filter": [knn_filter]}}},
                routing=ws,
            )
            ids = {hit["_source"]["id"] for hit in found["hits"]["hits"]}
            assert ids == want, (seat, policy)
            check_personal(workload, seat, policy, ids)
            knn_reads += 1
    COUNTS["index[opensearch-knn-filter] workloads"] += 1
    COUNTS["index[opensearch-knn-filter] reads"] += knn_reads


# ---------------------------------------------------------------- the backfill: unscoped, stamp_scopes


def test_unscoped_finds_records_written_before_scopes_and_stamping_scopes_them(
    contract: ContractBackend,
) -> None:
    memory = contract.backend.memory
    ws = f"backfill-{uuid.uuid4().hex[:8]}"
    owner = owner_scope("telegram.dm-u1", ["u1"], group=False)

    def message(record_id: str, seq: int, scope: MemoryScope | None) -> MemoryRecord:
        return MemoryRecord(
            id=record_id,
            workspace_id=ws,
            session_id="telegram.dm-u1",
            role="user",
            text="hello",
            seq=seq,
            created_at=T0,
            user_id="u1",
            scope=scope,
        )

    def summary(summary_id: str, scope: MemoryScope | None) -> Summary:
        return Summary(
            id=summary_id,
            workspace_id=ws,
            session_id="telegram.dm-u1",
            text="a talk",
            first_seq=0,
            last_seq=1,
            start_at=T0,
            end_at=T0,
            scope=scope,
        )

    def triple(triple_id: str, scope: MemoryScope | None) -> Triple:
        return Triple(
            id=triple_id,
            workspace_id=ws,
            subject="ada",
            predicate="likes",
            object="tea",
            session_id="telegram.dm-u1",
            user_id="u1",
            scope=scope,
        )

    memory.append_messages(ws, [message("m-old", 0, None), message("m-new", 1, owner)])
    memory.put_summary(summary("s-old", None))
    memory.put_summary(summary("s-new", owner))
    old_triple = triple("t-old", None)
    memory.put_triples(ws, [old_triple, triple("t-new", owner)])

    assert {r.id for r in memory.unscoped(ws)} == {"m-old", "s-old", "t-old"}
    assert len(memory.unscoped(ws, limit=1)) == 1
    # Before the backfill, u1 recalls the old records from their own session only.
    elsewhere = recall_scope(
        "personal", session_id="slack.dm-u1", conversation="slack.dm-u1", group=False, user_aliases=["u1"]
    )
    assert [s.id for s in memory.list_summaries(ws, scope=elsewhere)] == ["s-new"]
    assert [t.id for t in memory.triples_by_subject(ws, "ada", scope=elsewhere)] == ["t-new"]

    stamps: dict[str, tuple[MemoryTier, MemoryScope]] = {
        "m-old": ("message", owner),
        "s-old": ("summary", owner),
        "t-old": ("fact", owner),
        "unknown": ("fact", owner),
    }
    assert memory.stamp_scopes(ws, stamps) == 3
    assert memory.unscoped(ws) == []
    assert {s.id for s in memory.list_summaries(ws, scope=elsewhere)} == {"s-old", "s-new"}
    assert {t.id for t in memory.triples_by_subject(ws, "ada", scope=elsewhere)} == {"t-old", "t-new"}
    assert [r.scope for r in memory.get_messages(ws, "telegram.dm-u1")] == [owner, owner]
    # Nothing else of the records changed.
    stored = {t.id: t for t in memory.list_triples(ws, scope=WORKSPACE_WIDE)}
    assert stored["t-old"] == old_triple.model_copy(update={"scope": owner})

    # A message stamped by id without going through unscoped first (another process's backfill).
    memory.append_messages(ws, [message("m-later", 2, None)])
    assert memory.stamp_scopes(ws, {"m-later": ("message", owner)}) == 1
    assert memory.unscoped(ws) == []


@pytest.mark.parametrize("cache_max_docs", [100_000, 0], ids=["cached", "sql"])
def test_sqlite_index_stamp_scopes_sets_a_record_and_its_chunks(tmp_path: Any, cache_max_docs: int) -> None:
    db = Database(tmp_path / "index.db", load_vec=True)
    try:
        index = SqliteMemoryIndex(db, cache_max_docs=cache_max_docs)

        def doc(doc_id: str, session_id: str, **kw: Any) -> IndexDoc:
            return IndexDoc(
                id=doc_id, workspace_id="w1", session_id=session_id, tier="message", text="note", **kw
            )

        index.upsert(
            "w1",
            [
                doc("r1", "s1", vector=vector_of("r01")),
                doc("r1#1", "s1", vector=vector_of("r02"), metadata={"record_id": "r1"}),
                doc("r2", "s2", vector=vector_of("r03")),
            ],
        )
        reader = RecallScope(session_id="s9", users=("u1",))
        query = IndexQuery(text="note", vector=vector_of("r04"), k=10, scope=reader)
        assert (
            index.search("w1", query)
            == index.search("w1", query.model_copy(update={"k": 1}))
            == IndexResult()
        )

        owner = MemoryScope(conversation="s1", users=("u1",))
        assert index.stamp_scopes("w1", {"r1": owner}) == 2
        result = index.search("w1", query)
        assert (
            {h.doc.id for h in result.text_hits} == {h.doc.id for h in result.vector_hits} == {"r1", "r1#1"}
        )
        assert all(h.doc.scope == owner for h in result.text_hits)
        assert index.stamp_scopes("w1", {"r1": owner, "unknown": owner}) == 0
        # Another process's index over the same file sees the stamps too.
        again = SqliteMemoryIndex(db, cache_max_docs=cache_max_docs)
        assert {h.doc.id for h in again.search("w1", query).text_hits} == {"r1", "r1#1"}
    finally:
        db.close()
