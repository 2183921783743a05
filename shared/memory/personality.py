"""The learned personality (spec 003, "Personality Synthesis"): which style observations count,
and the directive the turn's prompt shows.

Style observations are Tier-3 triples of category "style" about a user (subject: their Sigil user
id), written by extraction (shared.consolidation.extraction.FactWriter) and by `memory_store`. One
seen again is reinforced instead of copied: `reinforced_count` + 1, and `updated_at` becomes the
time of its last reinforcement. `select_observations` keeps those still alive (a lifespan of 14
days times the reinforcement count, from the last reinforcement), strongest first, at most 15; at
least 3 are needed for a directive.

The directive is a triple too, so it has what every fact has: a workspace, an owner (MemoryScope:
private to the user by default, docs/privacy.md), erasure with the user's data (its user_id),
scope-filtered reads on both adapters. It lives under its own subject (`directive_subject`: not a
fact about the user, so neither the prompt's facts nor a recall by the user's id lists it), one
per user and owner. Its id is derived from its owner and the hash of the observations it was
written from (`directive_id`), the way a fact's id is derived from its content: synthesis finds by
the id alone whether the selected observations changed, and a retried write is the same record.

`LearnedPersonality` reads the directive for the turn's prompt at most once a minute per process,
user and scope (as shared.memory.tacit does the facts), so a warm turn makes no store call for it.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from cachetools import TTLCache
from pydantic import BaseModel, ConfigDict

from shared.memory.facts import owner_key, same_owner
from shared.memory.keys import normalize_key
from shared.models import WORKSPACE_WIDE, MemoryScope, RecallScope, Triple
from shared.ports import MemoryStore

# Spec 003's MinStyleObservations, DecayThresholdDays and the cap on the synthesis input.
MIN_OBSERVATIONS: Final = 3
LIFESPAN_DAYS: Final = 14
MAX_OBSERVATIONS: Final = 15
# Directives live under "personality/<user>" and carry this predicate; their ids start "pd_".
DIRECTIVE_NAMESPACE: Final = "personality"
DIRECTIVE_PREDICATE: Final = "directive"
DIRECTIVE_ID_PREFIX: Final = "pd_"
# Read per user for the prompt: one per owner (a direct conversation's, a group's) is the most.
MAX_DIRECTIVES: Final = 10
DIRECTIVE_TTL_S: Final = 60.0
MAX_ENTRIES: Final = 1024

_NOT_WORD = re.compile(r"[\W_]+")


class StyleObservation(BaseModel):
    """One style observation as synthesis uses it: spec 003's metadata, read from its triple."""

    model_config = ConfigDict(frozen=True)

    id: str
    key: str
    text: str
    reinforced_count: int
    first_observed: datetime
    last_reinforced: datetime

    @classmethod
    def of(cls, triple: Triple) -> StyleObservation:
        return cls(
            id=triple.id,
            key=triple.predicate,
            text=triple.object,
            reinforced_count=triple.reinforced_count,
            first_observed=_aware(triple.created_at),
            last_reinforced=_aware(triple.updated_at),
        )

    def expires_at(self) -> datetime:
        return self.last_reinforced + timedelta(days=LIFESPAN_DAYS * self.reinforced_count)


def observation_text(text: str) -> str:
    """An observation's words for equality: case, punctuation and spacing do not count
    ("Brief, short answers." is "brief short answers")."""
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


def same_observation(a: str, b: str) -> bool:
    return bool(observation_text(a)) and observation_text(a) == observation_text(b)


def select_observations(observations: Iterable[StyleObservation], now: datetime) -> list[StyleObservation]:
    """Spec 003's selection: the observations alive at `now`, strongest (most reinforced) first,
    then the most recently reinforced, at most MAX_OBSERVATIONS. Fewer than MIN_OBSERVATIONS is
    too little to synthesise from; the caller decides what that means."""
    at = _aware(now)
    alive = [o for o in observations if o.expires_at() > at]
    alive.sort(key=lambda o: (-o.reinforced_count, -o.last_reinforced.timestamp(), o.id))
    return alive[:MAX_OBSERVATIONS]


def inputs_hash(selected: Sequence[StyleObservation]) -> str:
    """What a directive is written from, as a hash: the set of observations (their keys and
    words), not their counts, so reinforcing an observation already in the set writes nothing new
    while adding, dropping or rewording one does."""
    lines = sorted(f"{normalize_key(o.key)}\n{observation_text(o.text)}" for o in selected)
    return hashlib.sha256("\n\n".join(lines).encode()).hexdigest()


def directive_subject(user_id: str) -> str:
    return normalize_key(f"{DIRECTIVE_NAMESPACE}/{user_id}")


def directive_id(workspace_id: str, user_id: str, owner: MemoryScope | None, digest: str) -> str:
    """Derived from the owner and the inputs' hash: `directive_prefix` finds the owner's."""
    return directive_prefix(workspace_id, user_id, owner) + digest[:32]


def directive_prefix(workspace_id: str, user_id: str, owner: MemoryScope | None) -> str:
    who = owner_key(owner) if owner is not None else "legacy"
    digest = hashlib.sha256(f"{workspace_id}\n{normalize_key(user_id)}\n{who}".encode()).hexdigest()
    return f"{DIRECTIVE_ID_PREFIX}{digest[:24]}_"


def is_directive(triple: Triple) -> bool:
    """Only synthesis writes these ids: a fact someone stored about "personality/<user>" (an
    entity of that name, a memory_store call) is never taken for a directive."""
    return (
        triple.id.startswith(DIRECTIVE_ID_PREFIX)
        and triple.predicate == DIRECTIVE_PREDICATE
        and triple.source == "consolidation"
        and triple.status == "active"
    )


def owned_by(triple: Triple, owner: MemoryScope | None, user_id: str) -> bool:
    """Whether `triple` is `owner`'s (of `user_id`'s, for one written before scopes existed)."""
    if owner is None:
        return triple.scope is None and triple.user_id == user_id
    return same_owner(triple.scope, owner)


def owner_reach(owner: MemoryScope | None) -> RecallScope:
    """A RecallScope that reaches `owner`'s records (and maybe a few others: filter with
    `owned_by`); the whole workspace for records from before scopes, which no narrower one reaches."""
    if owner is None:
        return WORKSPACE_WIDE
    return RecallScope(users=owner.users, conversation=owner.conversation, shared=owner.shared)


def style_observations(
    memory: MemoryStore, workspace_id: str, user_id: str, owner: MemoryScope | None, *, limit: int = 500
) -> list[StyleObservation]:
    """The owner's active style observations about `user_id`, alive or not."""
    found = memory.triples_by_subject(workspace_id, user_id, scope=owner_reach(owner), limit=limit)
    return [
        StyleObservation.of(t)
        for t in found
        if t.category == "style" and t.status == "active" and owned_by(t, owner, user_id)
    ]


def directives(memory: MemoryStore, workspace_id: str, user_id: str, scope: RecallScope) -> list[Triple]:
    """The user's directives visible under `scope`, newest first."""
    found = memory.triples_by_subject(
        workspace_id, directive_subject(user_id), scope=scope, limit=MAX_DIRECTIVES
    )
    return [t for t in found if is_directive(t) and t.user_id == user_id]


class LearnedPersonality:
    """The directive for the turn's "## Personality (Learned)" part: the newest one the turn's
    RecallScope reaches (a direct conversation's, or in a group the one learnt in that group),
    cached a minute per process, workspace, user and scope."""

    def __init__(
        self,
        memory: MemoryStore,
        *,
        ttl_s: float = DIRECTIVE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory = memory
        self._cache: TTLCache[tuple[str, str, RecallScope], str] = TTLCache(MAX_ENTRIES, ttl_s, timer=clock)
        self._lock = threading.Lock()

    def __call__(self, workspace_id: str, user_id: str, scope: RecallScope) -> str:
        """The directive's text; "" when there is none."""
        key = (workspace_id, user_id, scope)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        # Read outside the lock: two threads missing at once both read, which is harmless.
        found = directives(self.memory, workspace_id, user_id, scope)
        text = found[0].object if found else ""
        with self._lock:
            self._cache[key] = text
        return text


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


__all__ = [
    "DIRECTIVE_PREDICATE",
    "LIFESPAN_DAYS",
    "MAX_OBSERVATIONS",
    "MIN_OBSERVATIONS",
    "LearnedPersonality",
    "StyleObservation",
    "directive_id",
    "directive_prefix",
    "directive_subject",
    "directives",
    "inputs_hash",
    "is_directive",
    "observation_text",
    "owned_by",
    "owner_reach",
    "same_observation",
    "select_observations",
    "style_observations",
]
