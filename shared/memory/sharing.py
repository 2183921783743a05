"""Facts a workspace shares (`sigil memory share | unshare`): a shared fact is recalled by everyone
under the personal policy (shared.memory.scope.visible), in direct and group conversations alike.

The fact's scope is changed in the store and on its index document (same id) together, so
memory_search and the tacit facts of the prompt agree with memory_recall about who sees it.
"""

from __future__ import annotations

from shared.errors import NotFound
from shared.memory.scope import legacy_scope
from shared.models import WORKSPACE_WIDE, Triple
from shared.ports import MemoryIndex, MemoryStore

_PAGE = 500


def find_triple(memory: MemoryStore, workspace_id: str, triple_id: str) -> Triple | None:
    """The triple with this id, whatever its status (an admin read: the whole workspace's scope)."""
    # Ids are listed in order: start just before it (its id less the last character sorts first).
    after: str | None = triple_id[:-1] or None
    while page := memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=_PAGE):
        for triple in page:
            if triple.id == triple_id:
                return triple
            if triple.id > triple_id:
                return None
        after = page[-1].id
    return None


def set_shared(
    memory: MemoryStore, index: MemoryIndex, workspace_id: str, triple_id: str, *, shared: bool
) -> Triple:
    """Mark the fact `triple_id` shared (or not) in the store and the index; returns it as stored.

    A fact written before scopes existed gets the scope maintenance's backfill would give it
    (shared.memory.scope.legacy_scope), then the flag.
    """
    found = find_triple(memory, workspace_id, triple_id)
    if found is None:
        raise NotFound(f"no fact {triple_id!r} in workspace {workspace_id!r} (see `sigil memory list`)")
    scope = found.scope or legacy_scope(found.session_id, found.user_id)
    changed = found.model_copy(update={"scope": scope.model_copy(update={"shared": shared})})
    if changed.scope == found.scope:
        return found
    assert changed.scope is not None
    # The index first: the store's scope is what tells a rerun whether anything is left to do, so
    # a crash in between is finished by running the command again.
    index.stamp_scopes(workspace_id, {changed.id: changed.scope})
    memory.put_triple(changed)
    return changed
