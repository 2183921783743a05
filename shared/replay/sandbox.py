"""The sandbox: a copy of one workspace in a fresh embedded backend, for a replay to run in.

Everything is read from the source through its ports (never written) and written to the
sandbox's: the workspace's config (with the change applied), its people (identities), its
installed skills, its other sessions, and its memory (Tier-1 records, summaries, facts), with the
index rebuilt from that memory by the memory writer, as the product writes it. The sessions being
replayed start empty: their window, Tier-1 records, summaries and the facts they wrote are left
out, so the replayed conversation builds up again turn by turn. Budget counters, the audit log,
the outbox, routes and secrets are not copied: the sandbox counts its own spending from zero.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.config import Settings
from shared.memory.facts import fact_index_doc
from shared.memory.paging import all_messages, all_triples
from shared.memory.writer import MemoryWriter, summary_doc
from shared.models import WORKSPACE_WIDE, IndexDoc, WorkspaceConfig

# Summaries are listed in one call (the port has no paging by id).
SUMMARIES = 100_000
SESSIONS = 100_000


def sandbox_settings(settings: Settings, data_dir: Path) -> Settings:
    """The sandbox's settings: the embedded backend in `data_dir`, the rest as the source's. An
    aws source's "auto" embeddings mean none (shared.memory.embeddings), and so they do here."""
    embedding = settings.embedding_model
    if settings.backend == "aws" and embedding.strip() == "auto":
        embedding = "none"
    return settings.model_copy(
        update={"backend": "embedded", "data_dir": data_dir, "embedding_model": embedding}
    )


def open_sandbox(settings: Settings, data_dir: Path) -> Backend:
    return build_embedded_backend(sandbox_settings(settings, data_dir))


def copy_workspace(
    source: Backend, sandbox: Backend, config: WorkspaceConfig, *, replayed: Collection[str]
) -> None:
    """Copy workspace `config.id` from `source` into `sandbox`, whose config becomes `config` (the
    changed one); the sessions in `replayed` start empty."""
    ws = config.id
    sandbox.workspaces.put(config)
    for identity in source.identities.list_identities(ws):
        sandbox.identities.put(identity)
    _copy_skills(source, sandbox, ws)
    writer = MemoryWriter(sandbox.index, sandbox.embedder)
    for session in source.sessions.list_sessions(ws, limit=SESSIONS):
        if session.id in replayed:
            continue
        sandbox.sessions.save(session, expected_version=0)
        records = all_messages(source.memory, ws, session.id)
        if records:
            sandbox.memory.append_messages(ws, records)
            writer.write_messages(ws, records)
    summaries = [
        s
        for s in source.memory.list_summaries(ws, scope=WORKSPACE_WIDE, limit=SUMMARIES)
        if s.session_id not in replayed
    ]
    for summary in summaries:
        sandbox.memory.put_summary(summary)
    triples = [t for t in all_triples(source.memory, ws) if t.session_id not in replayed]
    if triples:
        sandbox.memory.put_triples(ws, triples)
    docs: list[IndexDoc] = [summary_doc(s) for s in summaries]
    # Only what recall reads: merged and pruned facts stay for provenance, out of the index.
    docs += [fact_index_doc(t).model_copy(update={"scope": t.scope}) for t in triples if t.status == "active"]
    if docs:
        writer.write_docs(ws, docs)


def _copy_skills(source: Backend, sandbox: Backend, ws: str) -> None:
    # A link is copied as the skill it reads: the sandbox has no other workspace to link to.
    for name in source.skills.list_skills(ws):
        files = {path: source.skills.read_file(ws, name, path) for path in source.skills.list_files(ws, name)}
        present = {path: data for path, data in files.items() if data is not None}
        if present:
            sandbox.skills.put_skill(ws, name, present)
