"""Erasure and fact-augmented keys, on both adapter sets: a fact about the erased person that keys
someone else's message leaves no text in that message's index document, and the message itself
and its other facts stay."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from shared.backend import Backend
from shared.clock import new_id
from shared.memory.erasure import erase_user
from shared.memory.fact_keys import attach_fact_keys
from shared.memory.search import MemorySearch
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, MemoryRecord, Triple
from shared.ports import ReadsDocs
from tests.contract.builders import at
from tests.contract.factories import BACKEND_FACTORIES


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend


def _found(backend: Backend, ws: str, query: str) -> list[str]:
    search = MemorySearch(backend.index, backend.memory, backend.embedder)
    outcome = search.search(ws, query, scope=WORKSPACE_WIDE, tiers=["message"], mode="bm25")
    return [h.id for h in outcome.hits]


def test_erasing_a_person_takes_their_facts_off_other_people_s_messages(backend: Backend) -> None:
    ws = new_id("ws")
    records = [
        MemoryRecord(
            id=f"bob-r{seq}",
            workspace_id=ws,
            session_id="bob-s",
            role="user",
            text=text,
            seq=seq,
            created_at=at(seq),
            user_id="bob",
        )
        for seq, text in enumerate(["My neighbour told me her favourite colour", "I like sailing"])
    ]
    backend.memory.append_messages(ws, records)
    MemoryWriter(backend.index, backend.embedder).write_messages(ws, records)
    about_alice = Triple(
        id="f-alice",
        workspace_id=ws,
        subject="alice",
        predicate="favourite colour",
        object="turquoise",
        session_id="bob-s",
        message_ids=["bob-r0"],
    )
    bobs = Triple(
        id="f-bob",
        workspace_id=ws,
        subject="bob",
        predicate="hobby",
        object="regattas",
        session_id="bob-s",
        message_ids=["bob-r0"],
        user_id="bob",
    )
    backend.memory.put_triples(ws, [about_alice, bobs])
    attach_fact_keys(backend.index, backend.memory, backend.embedder, ws, [about_alice, bobs])
    assert _found(backend, ws, "turquoise") == ["bob-r0"]

    report = erase_user(backend, ws, "alice")

    assert report.triples_deleted == 1
    assert _found(backend, ws, "turquoise") == []
    assert _found(backend, ws, "regattas") == ["bob-r0"]  # Bob's own fact still keys it
    assert isinstance(backend.index, ReadsDocs)
    docs = backend.index.get_docs(ws, ["bob-r0", "bob-r1"])
    assert len(docs) == 2 and not any("turquoise" in str(d.metadata) for d in docs)
