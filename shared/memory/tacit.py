"""Tacit facts: what the turn's system prompt may say about the user without a tool call.

Spec 000 keeps memory behind tools ("no automatic RAG injection burning tokens on every turn");
the one exception is a small budget of facts about the person talking (spec 004's fact
injection): the active Tier-3 triples whose subject is the sender's Sigil user id (merged and
pruned ones stay in the store for provenance, never in a prompt), among those the turn's
RecallScope reaches: under the personal policy, in a direct conversation the sender's own facts
and shared ones, in a group the group's and shared ones (a fact about the sender learnt in their
DM is not told to the group). They are read once a minute per process and scope, so a warm turn
makes no extra store call, and trimmed to their token budget by the context assembler
(shared.agent.context).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from shared.models import RecallScope, Triple
from shared.ports import MemoryStore

FACTS_TTL_S = 60.0
MAX_FACTS = 20  # more than the prompt's fact budget holds; the assembler keeps the most confident
# Triples read to find MAX_FACTS active ones: maintenance leaves merged and pruned facts behind.
READ_FACTOR = 3
MAX_ENTRIES = 1024  # (workspace, user, scope); full, the least recently used goes


class TacitFacts:
    def __init__(
        self,
        memory: MemoryStore,
        *,
        ttl_s: float = FACTS_TTL_S,
        limit: int = MAX_FACTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory = memory
        self.limit = limit
        self._cache: TTLCache[tuple[str, str, RecallScope], tuple[Triple, ...]] = TTLCache(
            MAX_ENTRIES, ttl_s, timer=clock
        )
        # The local gateway's lane workers share one instance.
        self._lock = threading.Lock()

    def __call__(self, workspace_id: str, user_id: str, scope: RecallScope) -> list[Triple]:
        """The facts about `user_id` that `scope` (the turn's) may recall."""
        key = (workspace_id, user_id, scope)
        try:
            with self._lock:
                facts = self._cache[key]
        except KeyError:
            # Read outside the lock: two threads missing at once both read, which is harmless.
            facts = tuple(self._active(workspace_id, user_id, scope))
            with self._lock:
                self._cache[key] = facts
        # Triples are mutable: a caller changing what it got must not change the cached answer.
        return [fact.model_copy(deep=True) for fact in facts]

    def _active(self, workspace_id: str, user_id: str, scope: RecallScope) -> list[Triple]:
        stored = self.memory.triples_by_subject(
            workspace_id, user_id, scope=scope, limit=self.limit * READ_FACTOR
        )
        return [t for t in stored if t.status == "active"][: self.limit]
