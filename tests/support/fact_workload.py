"""Synthetic conversations that keep restating the same facts, for the bounded-memory check.

Each turn stores one fact through the memory_store tool (the path the agent uses), in one of the
surface forms people and models produce for the same thing: as first said, in other case and
spacing, with punctuation, under a predicate spelt with punctuation (a new key, so a new triple),
and with a typo in the value under such a predicate. The tool dedups what it can at write time
(same normalised key); maintenance merges the rest (layer 1: case, punctuation and spacing;
layer 2: embedding cosine > 0.95). Facts are about distinct people and have distinct values, so
no two distinct facts are near-duplicates.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.backend import Backend
from shared.consolidation.maintenance import MaintenanceReport
from shared.consolidation.maintenance.driver import run_maintenance
from shared.memory.scope import owner_scope
from shared.models import WORKSPACE_WIDE
from shared.tools.core import ToolContext
from shared.tools.memory import MemoryStoreArgs, memory_store

PREDICATES = ["lives in", "works at", "likes", "owns", "studies", "collects"]
_SYLLABLES = ["ka", "lo", "mi", "ren", "to", "vu", "sel", "dra", "pin", "qua", "zor", "bel", "fi", "gon"]


@dataclass(frozen=True)
class Fact:
    subject: str
    predicate: str
    object: str


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))


def distinct_facts(n: int, *, seed: int = 7) -> list[Fact]:
    rng = random.Random(seed)
    facts = []
    for i in range(n):
        subject = f"{_word(rng).title()} {_word(rng).title()} {i}"
        obj = " ".join(_word(rng) for _ in range(12))
        facts.append(Fact(subject, rng.choice(PREDICATES), obj))
    return facts


def _typo(text: str, rng: random.Random) -> str:
    words = text.split()
    i = rng.randrange(len(words))
    j = rng.randrange(len(words[i]))
    words[i] = words[i][:j] + words[i][j] + words[i][j:]  # one letter doubled
    return " ".join(words)


def surface(fact: Fact, form: int, rng: random.Random) -> tuple[str, str, str]:
    """One way of stating `fact` (subject, predicate, object)."""
    s, p, o = fact.subject, fact.predicate, fact.object
    if form == 1:
        return s.upper(), p.title(), "  ".join(o.title().split())
    if form == 2:
        return s.lower(), p, o + "."
    if form == 3:
        return s, p + ":", o.capitalize() + "!"
    if form == 4:
        return s, p + ".", _typo(o, rng)
    return s, p, o


@dataclass
class WorkloadResult:
    turns: int
    facts_stated: int
    stored: int  # triples in the store, every status
    active: int
    active_per_fact: dict[str, int]
    reports: list[MaintenanceReport]


def restate_facts(
    backend: Backend,
    workspace_id: str,
    *,
    facts: list[Fact],
    turns: int,
    maintenance_every: int,
    start: datetime,
    seed: int = 11,
    on_turn: Callable[[int], None] | None = None,
) -> WorkloadResult:
    """`turns` turns, each storing one of `facts` in some surface form; maintenance every
    `maintenance_every` turns and once at the end. Counts active records per distinct fact."""
    rng = random.Random(seed)
    clock = {"now": start}
    stated: set[str] = set()
    reports: list[MaintenanceReport] = []
    for turn in range(turns):
        clock["now"] = start + timedelta(minutes=turn)
        fact = facts[rng.randrange(len(facts))]
        stated.add(fact.subject)
        subject, predicate, obj = surface(fact, rng.randrange(5), rng)
        ctx = ToolContext(
            workspace_id=workspace_id,
            session_id=f"s{turn // 50}",
            user_id="user-1",
            turn_id=f"turn-{turn}",
            backend=backend,
            scope=WORKSPACE_WIDE,
            owner=owner_scope(f"s{turn // 50}", ["user-1"], group=False),
            now=lambda: clock["now"],
        )
        memory_store.fn(MemoryStoreArgs(subject=subject, predicate=predicate, object=obj), ctx)
        if on_turn is not None:
            on_turn(turn)
        if (turn + 1) % maintenance_every == 0 or turn == turns - 1:
            reports.append(
                run_maintenance(backend, workspace_id, run_id=f"maint-{turn}", clock=lambda: clock["now"])
            )
    triples = []
    after: str | None = None
    while page := backend.memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=1000):
        triples += page
        after = page[-1].id
    by_subject = {f.subject.casefold(): f.subject for f in facts}
    per_fact = dict.fromkeys(sorted(stated), 0)
    for t in triples:
        if t.status == "active":
            per_fact[by_subject[t.subject.casefold()]] += 1
    return WorkloadResult(
        turns=turns,
        facts_stated=len(stated),
        stored=len(triples),
        active=sum(t.status == "active" for t in triples),
        active_per_fact=per_fact,
        reports=reports,
    )
