"""Workspace isolation of memory under random workloads (property test), on every backend set.

Hypothesis generates interleavings of writes, reads and deletes across three workspaces: facts
stored through memory_store, messages rolled out to Tier 1 (the MemoryStore and the index, as
the turn's commit writes them), summaries, then memory_search / memory_semantic / memory_recall
/ memory_summary through the tool registry, MemorySearch directly, and index and triple deletes.
Vectors are written and queried throughout (a hashing embedder), so the k-NN path is covered.

Every workspace writes the same words, the same subjects and predicates, and the same message
ids, so only the workspace scoping tells their data apart; each written text also carries a
marker token unique to its workspace. The invariant: nothing read in one workspace ever carries
another workspace's marker, every structured hit belongs to the workspace asked, and a delete in
one workspace never removes another's document with the same id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.backend import Backend
from shared.clock import new_id
from shared.memory.scope import owner_scope
from shared.memory.search import MemorySearch
from shared.models import WORKSPACE_WIDE, IndexDoc, MemoryRecord, Summary, ToolCall, WorkspaceConfig
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry
from tests.support.hashing_embedder import HashingEmbedder

from .factories import ContractBackend

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
REGISTRY = agent_registry()
WORDS = ["kayak", "fjord", "pesto", "garden", "budget", "violin", "passport", "sourdough"]
SUBJECTS = ["Ada", "Bob", "me"]  # "me": the user (the same user id in every workspace)
PREDICATES = ["likes", "home city", "works with"]

word = st.sampled_from(WORDS)
ws = st.integers(0, 2)
operation = st.one_of(
    st.tuples(st.just("store"), ws, st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES), word),
    st.tuples(st.just("roll"), ws, st.lists(word, min_size=1, max_size=3)),
    st.tuples(st.just("summary"), ws, word),
    st.tuples(st.just("search"), ws, word),
    st.tuples(st.just("semantic"), ws, word),
    st.tuples(st.just("recall"), ws, st.sampled_from([*WORDS, *SUBJECTS])),
    st.tuples(st.just("list_summaries"), ws),
    st.tuples(st.just("delete"), ws, st.integers(0, 20)),
)


@pytest.fixture
def backend(contract: ContractBackend) -> Iterator[Backend]:
    # Vectors on every write and query, so k-NN is scoped too; hashed features rather than MiniLM,
    # whose forward pass would be most of this test's time (meaning is not what is tested here).
    contract.backend.embedder = HashingEmbedder(dimensions=64)
    yield contract.backend


class World:
    """Three fresh workspaces on one backend, what each has written, and the checks."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.workspaces = [new_id(f"iso{i}") for i in range(3)]
        self.serial = 0
        self.messages: list[list[str]] = [[], [], []]  # index doc ids written per workspace, live
        self.seq = [0, 0, 0]  # Tier-1 positions used per workspace
        self.facts: list[list[str]] = [[], [], []]  # triple ids per workspace, live

    def marker(self, i: int) -> str:
        self.serial += 1
        return f"mark{i}q{self.serial}"

    def tool(self, i: int, name: str, args: dict[str, Any]) -> str:
        workspace = self.workspaces[i]
        ctx = ToolContext(
            workspace_id=workspace,
            session_id="web.s1",
            user_id="u1",
            turn_id=f"t{self.serial}",
            backend=self.backend,
            # The widest reach: whatever a scope admits, the workspace boundary must still hold.
            scope=WORKSPACE_WIDE,
            owner=owner_scope("web.s1", ["u1"], group=False),
            now=lambda: T0,
        )
        call = ToolCall(id="c", name=name, arguments=json.dumps(args))
        result = REGISTRY.execute(call, ctx, WorkspaceConfig(id=workspace))
        self.assert_own(i, result.content)
        return result.content

    def assert_own(self, i: int, text: str) -> None:
        for j in range(3):
            if j != i:
                assert f"mark{j}q" not in text, f"workspace {j}'s data read in workspace {i}"

    # ------------------------------------------------------------ operations

    def store(self, i: int, subject: str, predicate: str, value: str) -> None:
        args: dict[str, Any] = {"predicate": predicate, "object": f"{value} {self.marker(i)}"}
        if subject != "me":
            args["subject"] = subject
        out = self.tool(i, "memory_store", args)
        fact_id = out.split("[fact ", 1)[1].split(" ", 1)[0]
        if fact_id not in self.facts[i]:
            self.facts[i].append(fact_id)

    def roll(self, i: int, words: list[str]) -> None:
        workspace, n = self.workspaces[i], self.seq[i]
        self.seq[i] += len(words)
        # The same ids in every workspace: only the scoping keeps them apart.
        records = [
            MemoryRecord(
                id=f"msg{n + k}",
                workspace_id=workspace,
                session_id="web.s1",
                role="user",
                text=f"{w} {self.marker(i)}",
                seq=n + k,
                created_at=T0 + timedelta(minutes=n + k),
            )
            for k, w in enumerate(words)
        ]
        self.backend.memory.append_messages(workspace, records)
        vectors = self.backend.embedder.embed([r.text for r in records]) if self.backend.embedder else []
        self.backend.index.upsert(
            workspace,
            [
                IndexDoc(
                    id=r.id,
                    workspace_id=workspace,
                    session_id=r.session_id,
                    tier="message",
                    text=r.text,
                    vector=v,
                    created_at=r.created_at,
                )
                for r, v in zip(records, vectors, strict=True)
            ],
        )
        self.messages[i].extend(r.id for r in records)

    def summary(self, i: int, value: str) -> None:
        workspace = self.workspaces[i]
        self.backend.memory.put_summary(
            Summary(
                id=f"sum{self.serial}",
                workspace_id=workspace,
                session_id="web.s1",
                text=f"talked about {value} {self.marker(i)}",
                first_seq=0,
                last_seq=49,
                start_at=T0,
                end_at=T0 + timedelta(hours=1),
            )
        )

    def search(self, i: int, query: str, mode: str) -> None:
        self.tool(i, "memory_search" if mode == "hybrid" else "memory_semantic", {"query": query})
        workspace = self.workspaces[i]
        searcher = MemorySearch(self.backend.index, self.backend.memory, self.backend.embedder)
        outcome = searcher.search(
            workspace, query, k=20, mode="hybrid" if mode == "hybrid" else "vector", scope=WORKSPACE_WIDE
        )
        for hit in outcome.hits:
            self.assert_own(i, hit.text)
            assert hit.id in {*self.messages[i], *self.facts[i]}, f"{hit.id} is not workspace {i}'s"

    def recall(self, i: int, topic: str) -> None:
        self.tool(i, "memory_recall", {"topic": topic})
        workspace = self.workspaces[i]
        subject = "u1" if topic == "me" else topic
        for t in [
            *self.backend.memory.triples_by_subject(workspace, subject, scope=WORKSPACE_WIDE),
            *self.backend.memory.triples_by_object(workspace, topic, scope=WORKSPACE_WIDE),
        ]:
            assert t.workspace_id == workspace and t.id in self.facts[i]

    def list_summaries(self, i: int) -> None:
        self.tool(i, "memory_summary", {})
        workspace = self.workspaces[i]
        assert all(
            s.workspace_id == workspace
            for s in self.backend.memory.list_summaries(workspace, scope=WORKSPACE_WIDE)
        )

    def delete(self, i: int, n: int) -> None:
        """Delete the n-th live message document (and fact) of workspace i, if it has one."""
        workspace = self.workspaces[i]
        if self.messages[i]:
            doc_id = self.messages[i].pop(n % len(self.messages[i]))
            self.backend.index.delete(workspace, [doc_id])
        if self.facts[i]:
            fact_id = self.facts[i].pop(n % len(self.facts[i]))
            self.backend.memory.delete_triple(workspace, fact_id)
            self.backend.index.delete(workspace, [fact_id])

    def check_counts(self) -> None:
        # A delete in one workspace removed nothing of another's, same ids notwithstanding.
        for i, workspace in enumerate(self.workspaces):
            assert self.backend.index.count(workspace) == len(self.messages[i]) + len(self.facts[i])


@settings(
    max_examples=50,
    deadline=None,
    # One backend per test, fresh workspaces per example: state never carries between examples.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(workload=st.lists(operation, min_size=1, max_size=12))
def test_no_result_ever_holds_another_workspaces_data(
    backend: Backend, workload: list[tuple[Any, ...]]
) -> None:
    world = World(backend)
    for op, i, *rest in workload:
        if op == "store":
            world.store(i, *rest)
        elif op == "roll":
            world.roll(i, rest[0])
        elif op == "summary":
            world.summary(i, rest[0])
        elif op == "search":
            world.search(i, rest[0], "hybrid")
        elif op == "semantic":
            world.search(i, rest[0], "vector")
        elif op == "recall":
            world.recall(i, rest[0])
        elif op == "list_summaries":
            world.list_summaries(i)
        else:
            world.delete(i, rest[0])
        world.check_counts()
