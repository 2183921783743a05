"""Embedded adapters: every port on SQLite files in settings.data_dir, for one machine.

Three database files, so that the busiest writers do not queue behind each other: `sigil.db`
(sessions, memory, outbox, workspaces, audit, identities, budget counters), `index.db` (FTS5 +
sqlite-vec) and `queue.db` (lanes and events), plus `secrets.json` and the files senders
attached (`media/`); the directory is its owner's alone (0700, its files 0600:
shared.adapters.embedded.owner_only).
"""

from __future__ import annotations

from shared.adapters.embedded.budgets import SqliteBudgetStore
from shared.adapters.embedded.consolidation_state import SqliteConsolidationState
from shared.adapters.embedded.db import Database, DatabaseClosed
from shared.adapters.embedded.dead_letters import SqliteDeadLetters
from shared.adapters.embedded.embedding_cache import SqliteEmbeddingCache
from shared.adapters.embedded.events import LocalScheduler, SqliteEventBus, StoredEvent
from shared.adapters.embedded.identities import SqliteIdentityStore
from shared.adapters.embedded.index import SqliteMemoryIndex, fts_match_query
from shared.adapters.embedded.lanes import DeadLetter, EmbeddedLaneRunner, SqliteLanes
from shared.adapters.embedded.media import FileMediaStore
from shared.adapters.embedded.media_usage import SqliteMediaUsage
from shared.adapters.embedded.memory import SqliteMemoryStore
from shared.adapters.embedded.outbox import SqliteOutbox
from shared.adapters.embedded.owner_only import open_data_dir
from shared.adapters.embedded.routes import SqliteRouteStore
from shared.adapters.embedded.schedules import SqliteSchedules
from shared.adapters.embedded.secrets import FileSecretStore
from shared.adapters.embedded.send_ledger import SqliteSendLedger
from shared.adapters.embedded.sessions import SqliteSessionStore
from shared.adapters.embedded.skills import FileSkillStore
from shared.adapters.embedded.workspaces import SqliteAuditLog, SqliteWorkspaceStore
from shared.backend import Backend
from shared.config import Settings
from shared.memory.embeddings import build_embedder
from shared.memory.embeddings.cache import CachedEmbedder

__all__ = [
    "Database",
    "DatabaseClosed",
    "DeadLetter",
    "EmbeddedLaneRunner",
    "FileMediaStore",
    "FileSecretStore",
    "FileSkillStore",
    "LocalScheduler",
    "SqliteAuditLog",
    "SqliteBudgetStore",
    "SqliteConsolidationState",
    "SqliteDeadLetters",
    "SqliteEmbeddingCache",
    "SqliteEventBus",
    "SqliteIdentityStore",
    "SqliteLanes",
    "SqliteMediaUsage",
    "SqliteMemoryIndex",
    "SqliteMemoryStore",
    "SqliteOutbox",
    "SqliteRouteStore",
    "SqliteSchedules",
    "SqliteSendLedger",
    "SqliteSessionStore",
    "SqliteWorkspaceStore",
    "StoredEvent",
    "build_embedded_backend",
    "fts_match_query",
    "open_data_dir",
]


def build_embedded_backend(settings: Settings) -> Backend:
    """Open (creating on first use) every embedded store under settings.data_dir.

    backend.lanes is a SqliteLanes and backend.events a SqliteEventBus: the local runtime hands
    them to an EmbeddedLaneRunner and a LocalScheduler, which it must stop before close().
    """
    data_dir = open_data_dir(settings.data_dir)
    main = Database(data_dir / "sigil.db")
    index_db = Database(data_dir / "index.db", load_vec=True)
    queue = Database(data_dir / "queue.db")
    try:
        secrets = FileSecretStore(data_dir / "secrets.json")
        embedder = build_embedder(settings, secrets)
        backend = Backend(
            sessions=SqliteSessionStore(main),
            memory=SqliteMemoryStore(main),
            index=SqliteMemoryIndex(index_db),
            lanes=SqliteLanes(queue),
            outbox=SqliteOutbox(main),
            events=SqliteEventBus(queue),
            workspaces=SqliteWorkspaceStore(main),
            audit=SqliteAuditLog(main),
            secrets=secrets,
            identities=SqliteIdentityStore(main),
            send_ledger=SqliteSendLedger(main),
            budgets=SqliteBudgetStore(main),
            consolidation=SqliteConsolidationState(main),
            routes=SqliteRouteStore(main),
            skills=FileSkillStore(data_dir),
            # With the lanes it fires into (the local scheduler's `schedules` job).
            schedules=SqliteSchedules(queue),
            # Bytes under <data_dir>/media, records beside the sessions.
            media=FileMediaStore(main, data_dir),
            media_usage=SqliteMediaUsage(main),
            # The local model is built unloaded: its weights are read on the first embedding.
            embedder=CachedEmbedder(embedder, SqliteEmbeddingCache(main)) if embedder else None,
            closers=[main.close, index_db.close, queue.close],
        )
        # The lanes' own tables (SqliteLanes migrated them just above); a redrive wakes its runner.
        lanes = backend.lanes
        assert isinstance(lanes, SqliteLanes)
        backend.dead_letters = SqliteDeadLetters(queue, notify=lanes.notify)
    except BaseException:
        for db in (main, index_db, queue):
            db.close()
        raise
    return backend
