"""The names a workspace's people go by, for memory search.

Why: a question that names a person ("what did Alice paint?") is answered by matching the name
against the authors of the messages (shared.memory.search, the author boost), and the name is
left out of the query's embedding, where it only pulls towards every message that mentions
Alice. To leave it out, the search must know which words are names before it embeds the query:
these are the display names of the workspace's identities (shared.identity records the channel's
sender name there, as the turn records it as each message's author). Read at most once a minute
per process, so a search adds no store call while the names are fresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from weakref import WeakKeyDictionary

from pydantic import BaseModel, ConfigDict

from shared.memory.search import name_words
from shared.ports import IdentityStore
from shared.ttl_cache import TtlCache

logger = logging.getLogger(__name__)

PEOPLE_TTL_S = 60.0


class _Names(BaseModel):
    model_config = ConfigDict(frozen=True)

    words: frozenset[str]


class WorkspacePeople:
    """`people(workspace_id)`: the words of the display names of the workspace's identities
    (MemorySearch's `people`)."""

    def __init__(
        self,
        identities: IdentityStore,
        *,
        ttl_s: float = PEOPLE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._identities = identities
        self._cache: TtlCache[str, _Names] = TtlCache(ttl_s=ttl_s, clock=clock)

    def __call__(self, workspace_id: str) -> frozenset[str]:
        found = self._cache.get(workspace_id, lambda: self._load(workspace_id))
        return found.words if found is not None else frozenset()

    def _load(self, workspace_id: str) -> _Names:
        words: set[str] = set()
        for identity in self._identities.list_identities(workspace_id):
            if identity.display_name:
                words |= name_words(identity.display_name)
        return _Names(words=frozenset(words))


# One per identity store, so the tools (which build a MemorySearch per call) share its cache.
_BY_STORE: WeakKeyDictionary[IdentityStore, WorkspacePeople] = WeakKeyDictionary()


def people_of(identities: IdentityStore) -> WorkspacePeople:
    try:
        people = _BY_STORE.get(identities)
        if people is None:
            people = _BY_STORE[identities] = WorkspacePeople(identities)
    except TypeError:  # a store that can't be weakly referenced or hashed: no shared cache
        people = WorkspacePeople(identities)
    return people
