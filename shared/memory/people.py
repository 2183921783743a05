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
import threading
import time
from collections.abc import Callable
from weakref import WeakKeyDictionary

from cachetools import TTLCache

from shared.memory.search import name_words
from shared.ports import IdentityStore

logger = logging.getLogger(__name__)

PEOPLE_TTL_S = 60.0
MAX_ENTRIES = 1024  # workspaces; full, the least recently used goes


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
        self._cache: TTLCache[str, frozenset[str]] = TTLCache(MAX_ENTRIES, ttl_s, timer=clock)
        # The tools' searches run on the local gateway's lane workers, sharing one instance.
        self._lock = threading.Lock()

    def __call__(self, workspace_id: str) -> frozenset[str]:
        try:
            with self._lock:
                return self._cache[workspace_id]
        except KeyError:
            # Read outside the lock: two threads missing at once both read, which is harmless.
            words = self._load(workspace_id)
            with self._lock:
                self._cache[workspace_id] = words
            return words

    def _load(self, workspace_id: str) -> frozenset[str]:
        words: set[str] = set()
        for identity in self._identities.list_identities(workspace_id):
            if identity.display_name:
                words |= name_words(identity.display_name)
        return frozenset(words)


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
