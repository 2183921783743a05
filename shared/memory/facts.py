"""A Tier-3 fact's identity and its index document: one definition for every writer of facts
(the `memory_store` tool, compaction's extraction, maintenance).

A fact belongs to the people of its MemoryScope. Two people stating the same triple own two
facts: the id includes the owner (`owner_key`), so one never overwrites the other's, and dedup
and merging only ever join facts of the same owner (`same_owner`), so a merged fact is never
visible to someone who could not see one of its parts.
"""

from __future__ import annotations

import hashlib

from shared.memory.keys import normalize_key
from shared.models import IndexDoc, MemoryScope, Triple

MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 2048


def fact_id(
    workspace_id: str, subject: str, predicate: str, obj: str, owner: MemoryScope | None = None
) -> str:
    """Deterministic from the normalised triple and its owner (`owner_key`): a retried store
    writes the same fact, not a copy; another owner's statement of it is another fact. Without an
    owner, the id facts had before scopes existed."""
    parts = [workspace_id, normalize_key(subject), normalize_key(predicate), normalize_key(obj)]
    if owner is not None:
        parts.append(owner_key(owner))
    return "f_" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def owner_key(scope: MemoryScope) -> str:
    """Who may see a fact of this scope, as a key: its people, whether it is shared, and for a
    group's fact the group. A direct conversation's conversation is left out: the same person's
    fact learnt on Telegram and on Slack is one fact (they recall both from either)."""
    where = (scope.conversation or "") if scope.group else ""
    return "|".join(("shared" if scope.shared else "", "group" if scope.group else "", where, *scope.users))


def same_owner(a: MemoryScope | None, b: MemoryScope | None) -> bool:
    """Whether facts of these scopes may be deduplicated or merged into one. A fact written
    before scopes existed (None) joins nothing this way (see `may_join`)."""
    return a is not None and b is not None and owner_key(a) == owner_key(b)


def may_join(existing: Triple, owner: MemoryScope | None, *, user_id: str | None, session_id: str) -> bool:
    """Whether a new statement by `user_id` in `session_id`, owned by `owner`, may update the
    stored fact `existing` (dedup): the same owner's; or, for a fact from before scopes, the same
    person's of this very session, where it was visible already (it takes the owner's scope)."""
    if existing.scope is not None:
        return same_owner(existing.scope, owner)
    return existing.user_id == user_id and existing.session_id == session_id


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
    if triple.message_ids:
        # The messages it was read from: a fact hit lends its score to them (shared.memory.expand).
        metadata["message_ids"] = " ".join(triple.message_ids)
    return IndexDoc(
        id=triple.id,
        workspace_id=triple.workspace_id,
        session_id=triple.session_id,
        tier="fact",
        text=fact_text(triple),
        vector=vector,
        created_at=triple.updated_at,
        metadata=metadata,
        scope=triple.scope,
    )
