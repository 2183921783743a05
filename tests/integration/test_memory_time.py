"""Time-aware memory search on both index adapters, and the memory tools' dated output.

Messages said at different times go in through the memory writer (as a turn's roll-out writes
them) into the embedded index, searched through its in-memory copy and in SQL, and into
OpenSearch (osmem-server over HTTP; osmem has no k-NN, so that index is searched by BM25, as
memory search does without an embedder). The question is asked as the turn asks it: with the
turn's time, which the search resolves "last week", "yesterday" or "before the move" against.
"""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from osmem_server import OsmemServer

from shared.adapters.aws.opensearch import OpenSearchIndex, opensearch_client
from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore, build_embedded_backend
from shared.adapters.embedded.index import _MIGRATIONS
from shared.agent.loop import Safety
from shared.agent.preflight import user_message
from shared.backend import Backend
from shared.config import Settings
from shared.memory.scope import owner_scope, recall_scope
from shared.memory.search import MemorySearch, SearchOutcome
from shared.memory.writer import MemoryWriter
from shared.models import (
    WORKSPACE_WIDE,
    InboundMessage,
    IndexQuery,
    MemoryRecord,
    RecallScope,
    Sender,
    ToolCall,
    WorkspaceConfig,
)
from shared.ports import Embedder, MemoryIndex
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws-time"
NOW = datetime(2026, 3, 11, 15, 0, tzinfo=UTC)  # a Wednesday; last week is 2 to 8 March


def at(month: int, day: int, hour: int = 10) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


# id, when it was said, text. Every "bought" message is a BM25 match for "what I bought".
SAID = [
    ("m-jan", at(1, 20), "I bought a red bike at the flea market."),
    ("m-feb", at(2, 10), "I bought new running shoes for the spring race."),
    ("m-move", at(2, 15), "We finally did the move to Lyon, boxes everywhere."),
    ("m-lw1", at(3, 3), "I bought a lamp for the study."),
    ("m-lw2", at(3, 6), "I bought flowers for Ada's birthday."),
    ("m-yday", at(3, 10), "I bought coffee beans from the roaster."),
]
WHEN = {i: t for i, t, _ in SAID}


def records(session: str = "s1", user: str = "u1") -> list[MemoryRecord]:
    # Each in its own session, so no message lends another its words as context: what a
    # message's time window admits is then decided by its own text alone.
    return [
        MemoryRecord(
            id=i,
            workspace_id=WS,
            session_id=f"{session}-{i}",
            role="user",
            text=text,
            seq=n,
            created_at=when,
            user_id=user,
            scope=owner_scope("web.c1", [user], group=False),
        )
        for n, (i, when, text) in enumerate(SAID)
    ]


@pytest.fixture(scope="module")
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture(params=["embedded-cached", "embedded-sql", "opensearch"])
def searched(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, osmem: OsmemServer
) -> Iterator[tuple[MemoryIndex, MemorySearch]]:
    """An index holding SAID, and the search the memory tools would make over it."""
    embedder: Embedder | None
    db: Database | None = None
    memory_db = Database(tmp_path / "memory.db")
    memory = SqliteMemoryStore(memory_db)
    index: MemoryIndex
    if request.param == "opensearch":
        index = OpenSearchIndex(client=opensearch_client(osmem.url), index=f"mem-{uuid.uuid4().hex[:12]}")
        embedder = None  # osmem answers no k-NN query: BM25, as without an embedder
    else:
        db = Database(tmp_path / "index.db", load_vec=True)
        index = SqliteMemoryIndex(db, cache_max_docs=0 if request.param == "embedded-sql" else 500_000)
        embedder = HashingEmbedder()
    written = records()
    MemoryWriter(index, embedder).write_messages(WS, written)
    memory.append_messages(WS, written)
    yield index, MemorySearch(index, memory, embedder)
    memory_db.close()
    if db is not None:
        db.close()


def ask(search: MemorySearch, query: str, k: int, scope: RecallScope = WORKSPACE_WIDE) -> SearchOutcome:
    return search.search(WS, query, scope=scope, k=k, tiers=["message"], now=NOW)


def test_last_week_returns_only_what_was_said_last_week(searched: tuple[MemoryIndex, MemorySearch]) -> None:
    _, search = searched
    outcome = ask(search, "what did I say I bought last week", k=2)
    assert {h.id for h in outcome.hits} == {"m-lw1", "m-lw2"}
    assert outcome.time is not None and outcome.time.applied == "filter"
    assert (outcome.time.start, outcome.time.end) == (at(3, 2, 0), at(3, 9, 0))
    # Without the turn's time nothing is resolved: the same words find every purchase.
    plain = search.search(
        WS, "what did I say I bought last week", scope=WORKSPACE_WIDE, k=5, tiers=["message"]
    )
    assert plain.time is None and {"m-jan", "m-feb"} <= {h.id for h in plain.hits}


def test_a_window_too_small_for_k_boosts_it_first_and_fills_from_outside(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    _, search = searched
    outcome = ask(search, "what did I say I bought yesterday", k=4)
    assert outcome.time is not None and (outcome.time.mode, outcome.time.applied) == ("filter", "boost")
    assert outcome.hits[0].id == "m-yday"
    assert len(outcome.hits) == 4 and all(h.created_at < at(3, 10, 0) for h in outcome.hits[1:])


def test_a_time_something_happened_boosts_without_filtering(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    """ "What I bought last week" may have been told of later: last week's first, the rest after."""
    _, search = searched
    outcome = ask(search, "what I bought last week", k=4)
    assert outcome.time is not None and (outcome.time.mode, outcome.time.applied) == ("boost", "boost")
    assert {h.id for h in outcome.hits[:2]} == {"m-lw1", "m-lw2"}
    assert len(outcome.hits) == 4 and not any(outcome.time.contains(h.created_at) for h in outcome.hits[2:])


def test_the_index_filters_on_the_window_whatever_the_words(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    index, _ = searched
    query = IndexQuery(
        text="bought lamp bike flowers",
        k=10,
        scope=WORKSPACE_WIDE,
        created_from=at(2, 1, 0),
        created_before=at(3, 4, 0),
    )
    result = index.search(WS, query)
    assert {h.doc.id for h in result.text_hits} == {"m-feb", "m-lw1"}
    # Either end open: from the start of March on; before February.
    later = index.search(WS, query.model_copy(update={"created_from": at(3, 1, 0), "created_before": None}))
    assert {h.doc.id for h in later.text_hits} == {"m-lw1", "m-lw2", "m-yday"}
    earlier = index.search(WS, query.model_copy(update={"created_from": None, "created_before": at(2, 1, 0)}))
    assert {h.doc.id for h in earlier.text_hits} == {"m-jan"}


def test_the_window_and_the_scope_both_apply(searched: tuple[MemoryIndex, MemorySearch]) -> None:
    _, search = searched
    stranger = recall_scope(
        "personal", session_id="other", conversation="web.c2", group=False, user_aliases=("u9",)
    )
    assert ask(search, "what did I say I bought last week", k=2, scope=stranger).hits == []
    mine = recall_scope(
        "personal", session_id="other", conversation="web.c1", group=False, user_aliases=("u1",)
    )
    assert {h.id for h in ask(search, "what did I say I bought last week", k=2, scope=mine).hits} == {
        "m-lw1",
        "m-lw2",
    }


def test_before_the_move_is_bounded_by_when_the_move_was_said(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    _, search = searched
    before = ask(search, "what I bought before the move", k=2)
    assert {h.id for h in before.hits} == {"m-jan", "m-feb"}
    assert before.time is not None and before.time.end == WHEN["m-move"]
    assert before.time.note is not None and "the move" in before.time.note
    after = ask(search, "what I bought after the move", k=3)
    assert after.time is not None and after.time.start == WHEN["m-move"]
    assert {h.id for h in after.hits} == {"m-lw1", "m-lw2", "m-yday"}


def test_an_anchor_nobody_spoke_of_leaves_the_search_unfiltered(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    _, search = searched
    outcome = ask(search, "what I bought before the wedding", k=6)
    assert outcome.time is not None and outcome.time.applied == "none"
    assert outcome.time.note == "'the wedding' not found in memory"
    assert {"m-jan", "m-yday"} <= {h.id for h in outcome.hits}


def test_when_did_filters_nothing_and_the_hits_carry_their_dates(
    searched: tuple[MemoryIndex, MemorySearch],
) -> None:
    _, search = searched
    outcome = ask(search, "when did I buy the lamp", k=3)
    assert outcome.time is not None and (outcome.time.mode, outcome.time.applied) == ("when", "none")
    assert outcome.hits[0].id == "m-lw1" and outcome.hits[0].created_at == WHEN["m-lw1"]


def test_documents_indexed_before_the_time_column_are_backfilled(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "index.db", load_vec=True)
    index = SqliteMemoryIndex(db)
    MemoryWriter(index, HashingEmbedder()).write_messages(WS, records())
    # The file as the code before this column left it: no created_us, at the schema step before it
    # (the steps after it run again too, as they would on such a file).
    db.execute("DROP INDEX index_docs_by_time")
    db.execute("ALTER TABLE index_docs DROP COLUMN created_us")
    step = next(i for i, sql in enumerate(_MIGRATIONS) if "ADD COLUMN created_us" in sql)
    db.execute("UPDATE schema_version SET version = ? WHERE component = 'index'", (step,))
    for cache in (500_000, 0):
        reopened = SqliteMemoryIndex(db, cache_max_docs=cache)
        outcome = MemorySearch(reopened, SqliteMemoryStore(db), HashingEmbedder()).search(
            WS, "what did I say I bought last week", scope=WORKSPACE_WIDE, k=2, tiers=["message"], now=NOW
        )
        assert {h.id for h in outcome.hits} == {"m-lw1", "m-lw2"}
    stored = dict(db.query("SELECT id, created_us FROM index_docs"))
    assert stored["m-lw1"] == int(WHEN["m-lw1"].timestamp()) * 1_000_000
    db.close()


# ---------------------------------------------------------------- the tools


@pytest.fixture(params=["embedded", "opensearch"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path, osmem: OsmemServer) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path / "embedded"))
    if request.param == "opensearch":
        b.index = OpenSearchIndex(client=opensearch_client(osmem.url), index=f"mem-{uuid.uuid4().hex[:12]}")
        b.embedder = None
    else:
        b.embedder = HashingEmbedder()
    written = records()
    MemoryWriter(b.index, b.embedder).write_messages(WS, written)
    b.memory.append_messages(WS, written)
    yield b
    b.close()


def run_tool(backend: Backend, name: str, args: dict[str, Any]) -> str:
    ctx = ToolContext(
        workspace_id=WS,
        session_id="s-now",
        user_id="u1",
        turn_id="t1",
        backend=backend,
        scope=WORKSPACE_WIDE,
        owner=owner_scope("web.c1", ["u1"], group=False),
        now=lambda: NOW,
    )
    result = agent_registry().execute(
        ToolCall(id="c1", name=name, arguments=json.dumps(args)), ctx, WorkspaceConfig(id=WS)
    )
    assert not result.is_error, result.content
    return result.content


def test_memory_search_output_shows_the_window_and_each_date(backend: Backend) -> None:
    text = run_tool(backend, "memory_search", {"query": "what did I say I bought last week", "k": 2})
    assert 'time: "last week": said 2026-03-02 to 2026-03-08, only those' in text
    assert "2026-03-03 10:00 UTC" in text and "2026-03-06 10:00 UTC" in text
    assert "lamp" in text and "flowers" in text
    assert "2026-01-20" not in text and "bike" not in text


def test_memory_search_says_when_the_window_was_too_small(backend: Backend) -> None:
    text = run_tool(backend, "memory_search", {"query": "what did I say I bought yesterday", "k": 3})
    first = text.splitlines()[1]
    assert "those first" in text.splitlines()[0]
    assert first.startswith("1. [message · 2026-03-10 10:00 UTC") and "coffee" in first


def test_a_user_message_keeps_the_time_it_arrived() -> None:
    """What reaches the Tier-1 record and its index document: the inbound's time, not the turn's."""
    arrived = datetime(2026, 3, 3, 8, 15, tzinfo=UTC)
    inbound = InboundMessage(
        event_id="e1",
        channel="web",
        workspace_id=WS,
        session_id="web.s1",
        sender=Sender(id="p1", name="Ada"),
        chat_id="c1",
        text="I bought a lamp",
        received_at=arrived,
    )
    assert user_message(inbound, "t1", Safety(), "u1").created_at == arrived
