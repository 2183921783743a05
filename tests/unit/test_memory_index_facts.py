"""The embedded index's `facts` column (fact-augmented keys): an index made before it is rebuilt
with it and keeps its documents, and the in-memory copy scores a document's facts as FTS5 does."""

from __future__ import annotations

import pathlib

import pytest

from shared import serde
from shared.adapters.embedded import Database, SqliteMemoryIndex
from shared.adapters.embedded.index import _MIGRATIONS
from shared.memory.search import CONTEXT_KEY, FACTS_KEY
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery


def _doc(doc_id: str, text: str, **metadata: str) -> IndexDoc:
    return IndexDoc(
        id=doc_id, workspace_id="ws", session_id="s1", tier="message", text=text, metadata=metadata
    )


def _text_hits(index: SqliteMemoryIndex, text: str) -> list[tuple[str, float]]:
    result = index.search("ws", IndexQuery(scope=WORKSPACE_WIDE, text=text, k=10))
    return [(h.doc.id, h.score) for h in result.text_hits]


def test_an_index_made_before_the_facts_column_keeps_its_documents(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "index.db", load_vec=True)
    db.migrate("index", _MIGRATIONS[:-1])
    old = _doc("old", "kayaking on the fjord", **{CONTEXT_KEY: "we went north"})
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO index_docs (workspace_id, id, session_id, tier, dim, doc, record_id) "
            "VALUES (?, ?, ?, ?, NULL, ?, ?)",
            ("ws", "old", "s1", "message", serde.dumps(old), "old"),
        )
        conn.execute(
            "INSERT INTO index_text (rowid, text, context) VALUES (?, ?, ?)",
            (conn.last_insert_rowid(), old.text, "we went north"),
        )
    for cache in (0, 1000):
        index = SqliteMemoryIndex(db, cache_max_docs=cache)
        assert db.schema_version("index") == len(_MIGRATIONS)
        assert [d for d, _ in _text_hits(index, "kayaking")] == ["old"]
        assert [d for d, _ in _text_hits(index, "north")] == ["old"]  # its context survived
    index.upsert("ws", [_doc("new", "a quiet day", **{FACTS_KEY: "ada hobby: kayaking"})])
    assert [d for d, _ in _text_hits(index, "kayaking")] == ["old", "new"]
    db.close()


@pytest.mark.parametrize("facts_weight", [0.0, 0.5, 1.0])
def test_the_in_memory_copy_scores_facts_as_fts5_does(tmp_path: pathlib.Path, facts_weight: float) -> None:
    db = Database(tmp_path / "index.db", load_vec=True)
    docs = [
        _doc("a", "we booked the pottery class", **{FACTS_KEY: "ada hobby: ceramics\nada day: tuesday"}),
        _doc("b", "ceramics are fragile", **{CONTEXT_KEY: "the class was on tuesday"}),
        _doc("c", "nothing to see here"),
    ]
    sql = SqliteMemoryIndex(db, cache_max_docs=0, facts_weight=facts_weight)
    sql.upsert("ws", docs)
    cached = SqliteMemoryIndex(db, facts_weight=facts_weight)
    for query in ("ceramics tuesday", "pottery", "ada"):
        from_sql, from_copy = _text_hits(sql, query), _text_hits(cached, query)
        assert [d for d, _ in from_sql] == [d for d, _ in from_copy]
        assert [s for _, s in from_sql] == pytest.approx([s for _, s in from_copy], rel=1e-5)
    # The facts alone find a document, scored by their weight (FTS5 matches a weight-0 column too).
    [(doc_id, score)] = _text_hits(cached, "ada")
    assert doc_id == "a" and (score > 0) == (facts_weight > 0)
    db.close()
