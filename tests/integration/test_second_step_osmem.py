"""The second search seeded by the first's hits and the score neighbours lend
(shared.memory.second_step through MemorySearch) on the OpenSearch adapter, over real HTTP against
osmem-server (BM25 only: osmem answers no k-NN query), with a SQLite memory store: the second
query goes through the adapter with the first's scope, and a turn beside the best match rises."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from shared.adapters.aws.opensearch import OpenSearchIndex
from shared.adapters.embedded import Database, SqliteMemoryStore
from shared.memory.scope import owner_scope, recall_scope
from shared.memory.search import MemorySearch
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, RecallScope
from tests.contract.builders import user_records
from tests.contract.test_memory_second_step import TEXTS

DIM = 4
WS = "ws-second"
SCOPE = owner_scope("telegram.100", ["ada"], group=False)


@pytest.fixture
def memory(tmp_path: pathlib.Path, index: OpenSearchIndex) -> Iterator[SqliteMemoryStore]:
    db = Database(tmp_path / "sigil.db")
    store = SqliteMemoryStore(db)
    records = user_records(WS, TEXTS, user_id="ada", scope=SCOPE)
    store.append_messages(WS, records)
    MemoryWriter(index, None, context_before=0, context_after=0).write_messages(WS, records)
    yield store
    db.close()


def _found(
    index: OpenSearchIndex,
    memory: SqliteMemoryStore,
    query: str,
    scope: RecallScope = WORKSPACE_WIDE,
    **kw: object,
) -> list[str]:
    search = MemorySearch(index, memory, None, **kw)  # type: ignore[arg-type]
    return [h.id for h in search.search(WS, query, scope=scope, tiers=["message"], mode="bm25").hits]


def test_a_name_the_first_hits_mention_finds_a_message_under_the_scope(
    index: OpenSearchIndex, memory: SqliteMemoryStore
) -> None:
    ada = recall_scope(
        "personal", session_id="s1", conversation="telegram.100", group=False, user_aliases=("ada",)
    )
    bob = recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=("bob",)
    )
    assert _found(index, memory, "necklace grandma") == ["r0"]
    assert _found(index, memory, "necklace grandma", ada, feedback_weight=0.5) == ["r0", "r6"]
    assert _found(index, memory, "necklace grandma", bob, feedback_weight=0.5) == []


def test_a_turn_beside_the_best_match_rises(index: OpenSearchIndex, memory: SqliteMemoryStore) -> None:
    before = _found(index, memory, "paint sunset", neighbour_weight=0.0)
    assert before[0] == "r7" and before.index("r11") < before.index("r8")
    after = _found(index, memory, "paint sunset", neighbour_weight=1.0)
    assert after[0] == "r7" and after.index("r8") < after.index("r11")
