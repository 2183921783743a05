"""A Tier-3 fact's identity and its index document: one definition for every writer of facts
(the `memory_store` tool, compaction's extraction, maintenance)."""

from __future__ import annotations

import hashlib

from shared.memory.keys import normalize_key
from shared.models import IndexDoc, Triple

MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 2048


def fact_id(workspace_id: str, subject: str, predicate: str, obj: str) -> str:
    """Deterministic from the normalised triple: a retried store writes the same fact, not a copy."""
    key = "\n".join((workspace_id, normalize_key(subject), normalize_key(predicate), normalize_key(obj)))
    return "f_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def fact_text(triple: Triple) -> str:
    """What the index holds for a fact: spec 003's embeddable "key: value" shape."""
    return f"{triple.subject} {triple.predicate}: {triple.object}"


def fact_index_doc(triple: Triple, vector: list[float] | None = None) -> IndexDoc:
    """The fact-tier index document of a triple. Its id is the triple's, and metadata "subject"
    lets a hit be checked against the store (only active facts are recalled): every writer of
    fact documents should build them here."""
    metadata = {"subject": triple.subject, "predicate": triple.predicate, "category": triple.category}
    if triple.user_id:
        metadata["user_id"] = triple.user_id
    return IndexDoc(
        id=triple.id,
        workspace_id=triple.workspace_id,
        session_id=triple.session_id,
        tier="fact",
        text=fact_text(triple),
        vector=vector,
        created_at=triple.updated_at,
        metadata=metadata,
    )
