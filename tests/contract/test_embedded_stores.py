"""Embedded-only behaviour: files, schema, threads, the secrets file, index details."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import stat
import threading
from collections.abc import Iterator

import apsw
import pytest

from shared.adapters.embedded import (
    Database,
    DatabaseClosed,
    FileSecretStore,
    SqliteMemoryIndex,
    SqliteMemoryStore,
    build_embedded_backend,
    fts_match_query,
)
from shared.adapters.embedded.sessions import SqliteSessionStore
from shared.config import Settings
from shared.memory.keys import normalize_key
from shared.models import (
    WORKSPACE_WIDE,
    AuditRecord,
    IndexDoc,
    IndexQuery,
    OutboundMessage,
    RecallScope,
    Triple,
    WorkspaceConfig,
)

from .builders import record, session, unit_vector


def test_everything_persists_across_a_restart(tmp_path: pathlib.Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    backend = build_embedded_backend(settings)
    stored = backend.sessions.save(session("w1"), expected_version=0)
    backend.memory.append_messages("w1", [record("w1", "s1", 0)])
    backend.index.upsert(
        "w1", [IndexDoc(id="d1", workspace_id="w1", tier="fact", text="zebra", vector=[0.5, 0.5])]
    )
    entry = backend.outbox.append(
        OutboundMessage(
            workspace_id="w1", session_id="s1", channel="web", chat_id="c", turn_id="t", seq=1, text="x"
        )
    )
    backend.workspaces.put(WorkspaceConfig(id="w1"))
    backend.audit.append(AuditRecord(workspace_id="w1", session_id="s1", turn_id="t", outcome="ok"))
    backend.close()

    backend = build_embedded_backend(settings)
    try:
        assert backend.sessions.get("w1", "s1") == stored
        assert backend.memory.count_messages("w1", "s1") == 1
        result = backend.index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, text="zebra", vector=[1.0, 1.0]))
        assert [h.doc.id for h in result.text_hits] == [h.doc.id for h in result.vector_hits] == ["d1"]
        assert backend.outbox.read("w1", "s1") == [entry]
        assert backend.workspaces.get("w1") == WorkspaceConfig(id="w1")
        assert len(backend.audit.list_records("w1")) == 1
    finally:
        backend.close()
    assert sorted(p.name for p in (tmp_path / "data").glob("*.db")) == ["index.db", "queue.db", "sigil.db"]


def test_a_closed_backend_refuses_use(tmp_path: pathlib.Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    backend.close()
    backend.close()  # closing twice is harmless
    with pytest.raises(DatabaseClosed):
        backend.sessions.get("w1", "s1")


def test_files_are_in_wal_mode_with_a_busy_timeout(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "x.db", busy_timeout_ms=1234)
    try:
        assert db.query_one("PRAGMA journal_mode") == ("wal",)
        assert db.query_one("PRAGMA busy_timeout") == (1234,)
    finally:
        db.close()


def test_schema_creation_is_idempotent_and_versioned(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "x.db")
    SqliteSessionStore(db)
    SqliteSessionStore(db)
    assert db.schema_version("sessions") == 1
    # Version 1 is recorded as applied, so a step 1 is never run again, whatever it says.
    db.migrate("sessions", ["CREATE TABLE never_applied (x)"])
    assert db.query("SELECT name FROM sqlite_master WHERE name = 'never_applied'") == []
    db.close()


def test_a_schema_newer_than_the_code_is_refused(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "x.db")
    db.migrate("thing", ["CREATE TABLE t1 (x)", "CREATE TABLE t2 (x)"])
    with pytest.raises(RuntimeError, match="newer than this code"):
        db.migrate("thing", ["CREATE TABLE t1 (x)"])
    db.close()


def test_a_failed_migration_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "x.db")
    with pytest.raises(apsw.SQLError):
        db.migrate("thing", ["CREATE TABLE ok (x); CREATE TABLE broken (;"])
    assert db.schema_version("thing") == 0
    assert db.query("SELECT name FROM sqlite_master WHERE name = 'ok'") == []
    db.close()


def test_each_thread_has_its_own_connection_and_dead_threads_give_theirs_back(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "x.db")
    mine = db.connection()
    theirs: list[apsw.Connection] = []
    thread = threading.Thread(target=lambda: theirs.append(db.connection()))
    thread.start()
    thread.join()

    assert db.connection() is mine
    assert theirs[0] is not mine
    # The next new connection reclaims the dead thread's.
    other = threading.Thread(target=db.connection)
    other.start()
    other.join()
    with pytest.raises(apsw.ConnectionClosedError):
        theirs[0].execute("SELECT 1")
    db.close()


def test_many_threads_write_at_once_without_errors(tmp_path: pathlib.Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                current = backend.sessions.save(session("w1", f"s{n}-{i}"), expected_version=0)
                backend.sessions.save(current, expected_version=1)
                backend.memory.append_messages("w1", [record("w1", f"s{n}", i)])
                backend.index.upsert(
                    "w1",
                    [IndexDoc(id=f"d{n}-{i}", workspace_id="w1", tier="message", text="x", vector=[1.0, n])],
                )
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert len(backend.sessions.list_sessions("w1", limit=1000)) == 60
        assert backend.index.count("w1") == 60
    finally:
        backend.close()


# ---------------------------------------------------------------- index details


@pytest.fixture
def index(tmp_path: pathlib.Path) -> Iterator[SqliteMemoryIndex]:
    db = Database(tmp_path / "index.db", load_vec=True)
    yield SqliteMemoryIndex(db)
    db.close()


def test_vectors_of_different_dimensions_live_side_by_side(index: SqliteMemoryIndex) -> None:
    index.upsert(
        "w1",
        [
            IndexDoc(id="small", workspace_id="w1", tier="message", text="a", vector=[1.0, 0.0, 0.0]),
            IndexDoc(id="big", workspace_id="w1", tier="message", text="b", vector=unit_vector(0)),
        ],
    )
    assert [
        h.doc.id
        for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1.0, 0.0, 0.0])).vector_hits
    ] == ["small"]
    assert [
        h.doc.id
        for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(0))).vector_hits
    ] == ["big"]
    assert index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1.0] * 5)).vector_hits == []

    # Re-embedding with another model moves the doc to the other dimension's table.
    index.upsert(
        "w1", [IndexDoc(id="small", workspace_id="w1", tier="message", text="a", vector=unit_vector(1))]
    )
    assert index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1.0, 0.0, 0.0])).vector_hits == []
    assert {
        h.doc.id
        for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(1))).vector_hits
    } == {
        "small",
        "big",
    }


def test_a_zero_vector_is_indexed_for_text_only(
    index: SqliteMemoryIndex, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        index.upsert(
            "w1", [IndexDoc(id="z", workspace_id="w1", tier="message", text="zero", vector=[0.0, 0.0])]
        )
    assert "text only" in caplog.text
    assert [
        h.doc.id for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, text="zero")).text_hits
    ] == ["z"]
    assert index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1.0, 0.0])).vector_hits == []
    assert index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, vector=[0.0, 0.0])).vector_hits == []


def test_an_empty_tier_list_matches_nothing(index: SqliteMemoryIndex) -> None:
    index.upsert("w1", [IndexDoc(id="d", workspace_id="w1", tier="fact", text="alpha", vector=[1.0, 0.0])])
    result = index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, text="alpha", vector=[1.0, 0.0], tiers=[]))
    assert result.text_hits == [] and result.vector_hits == []


def test_accented_text_matches_without_accents(index: SqliteMemoryIndex) -> None:
    index.upsert("w1", [IndexDoc(id="d", workspace_id="w1", tier="message", text="Crème brûlée à Zürich")])
    assert [
        h.doc.id
        for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, text="creme brulee zurich")).text_hits
    ] == ["d"]


def test_the_index_needs_the_vector_extension(tmp_path: pathlib.Path) -> None:
    db = Database(tmp_path / "plain.db")
    with pytest.raises(RuntimeError, match="load_vec"):
        SqliteMemoryIndex(db)
    db.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello world", '"hello" OR "world"'),
        ('say "hi" OR NOT x*', '"say" OR "hi" OR "or" OR "not" OR "x"'),
        ("Hello hello HELLO", '"hello"'),
        ("snake_case-word", '"snake" OR "case" OR "word"'),
        ("Zürich 2025", '"zürich" OR "2025"'),
        ("", None),
        ("*** () :: --", None),
    ],
)
def test_fts_match_query_quotes_and_ors_words(text: str, expected: str | None) -> None:
    assert fts_match_query(text) == expected


def test_fts_match_query_caps_the_number_of_terms() -> None:
    query = fts_match_query(" ".join(f"w{i}" for i in range(100)), max_terms=5)
    assert query == '"w0" OR "w1" OR "w2" OR "w3" OR "w4"'


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("Ada Lovelace", "ada-lovelace"),
        ("  ada_lovelace ", "ada-lovelace"),
        ("Code_Style", "code-style"),
        ("Preference//Code-Style", "preference/code-style"),
        ("-/edge/-", "edge"),
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),
    ],
)
def test_normalize_key(value: str, key: str) -> None:
    assert normalize_key(value) == key


def test_triples_match_on_the_normalised_key(tmp_path: pathlib.Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    try:
        backend.memory.put_triple(
            Triple(id="t", workspace_id="w1", subject="code_style", predicate="is", object="tabs")
        )
        assert [
            t.id for t in backend.memory.triples_by_subject("w1", "Code Style", scope=WORKSPACE_WIDE)
        ] == ["t"]
        assert backend.memory.triples_by_subject("w1", " _ ", scope=WORKSPACE_WIDE) == []
    finally:
        backend.close()


# ---------------------------------------------------------------- secrets file


@pytest.fixture
def secrets_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "secrets.json"


def test_ensure_creates_a_random_url_safe_secret_once(secrets_path: pathlib.Path) -> None:
    store = FileSecretStore(secrets_path)
    assert store.get("webhook") is None

    value = store.ensure("webhook")

    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", value)  # 32 bytes, url-safe base64, unpadded
    assert store.ensure("webhook") == value
    assert store.get("webhook") == value
    assert FileSecretStore(secrets_path).get("webhook") == value
    assert store.ensure("other") != value


def test_the_secrets_file_is_owner_only(secrets_path: pathlib.Path) -> None:
    store = FileSecretStore(secrets_path)
    store.set("token", "t0ps3cret")
    assert stat.S_IMODE(os.stat(secrets_path).st_mode) == 0o600
    assert json.loads(secrets_path.read_text()) == {"token": "t0ps3cret"}

    os.chmod(secrets_path, 0o644)
    assert store.get("token") == "t0ps3cret"
    assert stat.S_IMODE(os.stat(secrets_path).st_mode) == 0o600


def test_secret_values_never_reach_logs_or_reprs(
    secrets_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FileSecretStore(secrets_path)
    with caplog.at_level(logging.DEBUG):
        value = store.ensure("signing")
        store.set("bot", "xoxb-very-secret")
        os.chmod(secrets_path, 0o666)
        store.get("bot")
    assert "signing" in caplog.text
    assert value not in caplog.text and "xoxb-very-secret" not in caplog.text
    assert value not in repr(store)


def test_a_corrupt_secrets_file_is_reported_without_its_content(secrets_path: pathlib.Path) -> None:
    secrets_path.write_text('{"bot": "xoxb-very-secret", oops}')
    os.chmod(secrets_path, 0o600)
    with pytest.raises(RuntimeError) as info:
        FileSecretStore(secrets_path).get("bot")
    assert "xoxb" not in str(info.value)


def test_set_and_delete(secrets_path: pathlib.Path) -> None:
    store = FileSecretStore(secrets_path)
    store.set("a", "1")
    store.set("b", "2")
    store.delete("a")
    store.delete("missing")
    assert store.names() == ["b"]
    assert store.get("a") is None


def test_concurrent_ensures_agree_on_one_value(secrets_path: pathlib.Path) -> None:
    stores = [FileSecretStore(secrets_path) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    values: list[str] = []

    def ensure(store: FileSecretStore) -> None:
        barrier.wait(5)
        values.append(store.ensure("shared"))

    threads = [threading.Thread(target=ensure, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(values) == 4 and len(set(values)) == 1


def test_rows_written_before_scopes_are_unscoped_after_the_migration(tmp_path: pathlib.Path) -> None:
    """A file from before scopes (memory at version 2, index at 4) with rows in it: after the
    migrations the rows have no scope, so only their own session and workspace-wide reads reach
    them, and the backfill finds them."""
    from shared.adapters.embedded import index as index_module
    from shared.adapters.embedded import memory as memory_module

    db = Database(tmp_path / "old.db", load_vec=True)
    try:
        db.migrate("memory", memory_module._MIGRATIONS[:2])
        db.migrate("index", index_module._MIGRATIONS[:4])
        fact = Triple(
            id="t1", workspace_id="w1", subject="ada", predicate="likes", object="tea", session_id="s1"
        )
        # The rows as the code before scopes wrote them (its documents had no scope field).
        old_doc = json.dumps({k: v for k, v in json.loads(fact.model_dump_json()).items() if k != "scope"})
        db.execute(
            "INSERT INTO memory_triples (workspace_id, id, subject_key, object_key, updated_us, status, doc) "
            "VALUES ('w1', 't1', 'ada', 'tea', 0, 'active', ?)",
            (old_doc,),
        )
        db.execute(
            "INSERT INTO index_docs (workspace_id, id, session_id, tier, dim, doc) "
            "VALUES ('w1', 'd1', 's1', 'message', NULL, ?)",
            (
                json.dumps(
                    {"id": "d1", "workspace_id": "w1", "session_id": "s1", "tier": "message", "text": "tea"}
                ),
            ),
        )
        db.execute("INSERT INTO index_text (rowid, text, context) VALUES (last_insert_rowid(), 'tea', '')")

        store = SqliteMemoryStore(db)
        index = SqliteMemoryIndex(db, cache_max_docs=0)
        assert db.schema_version("memory") == len(memory_module._MIGRATIONS)
        elsewhere = RecallScope(session_id="s2", users=("u1",), shared=True)
        own = RecallScope(session_id="s1")
        assert store.triples_by_subject("w1", "ada", scope=elsewhere) == []
        assert [t.id for t in store.triples_by_subject("w1", "ada", scope=own)] == ["t1"]
        assert [t.id for t in store.unscoped("w1")] == ["t1"]
        assert index.search("w1", IndexQuery(text="tea", scope=elsewhere)).text_hits == []
        assert [h.doc.id for h in index.search("w1", IndexQuery(text="tea", scope=own)).text_hits] == ["d1"]
        assert [
            h.doc.id for h in index.search("w1", IndexQuery(text="tea", scope=WORKSPACE_WIDE)).text_hits
        ] == ["d1"]
    finally:
        db.close()


def test_a_deleted_document_leaves_no_trace_in_the_database_file(tmp_path: pathlib.Path) -> None:
    # The right to erasure on the embedded backend: not in FTS5's segments (secure-delete), not in
    # SQLite's free pages (PRAGMA secure_delete). Words no other document shares a prefix with,
    # so FTS5's prefix compression cannot hide them from a byte search.
    path = tmp_path / "index.db"
    db = Database(path, load_vec=True)
    index = SqliteMemoryIndex(db)
    secret = "zqxjvkword"
    index.upsert(
        "w1",
        [
            IndexDoc(id="keep", workspace_id="w1", tier="message", text="alpha beta", vector=[1.0, 0.0]),
            IndexDoc(
                id="gone", workspace_id="w1", tier="message", text=f"{secret} Ysolde", vector=[0.0, 1.0]
            ),
        ],
    )
    db.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert secret.encode() in path.read_bytes()  # the byte search can see it while it is there

    index.delete("w1", ["gone"])
    db.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    raw = path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert secret.encode() not in raw
    assert b"ysolde" not in raw.lower()
    assert [
        h.doc.id for h in index.search("w1", IndexQuery(scope=WORKSPACE_WIDE, text="alpha")).text_hits
    ] == ["keep"]
    db.close()
