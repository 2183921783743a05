"""Fixtures the memory unit tests share: a real embedded index and memory store in a temp dir,
and tests/support's hashing embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore
from tests.support.hashing_embedder import HashingEmbedder


@pytest.fixture
def dbs(tmp_path: Path) -> Iterator[tuple[Database, Database]]:
    index_db = Database(tmp_path / "index.db", load_vec=True)
    main_db = Database(tmp_path / "sigil.db")
    yield index_db, main_db
    index_db.close()
    main_db.close()


@pytest.fixture
def index(dbs: tuple[Database, Database]) -> SqliteMemoryIndex:
    return SqliteMemoryIndex(dbs[0])


@pytest.fixture
def memory(dbs: tuple[Database, Database]) -> SqliteMemoryStore:
    return SqliteMemoryStore(dbs[1])


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder()
