"""The second search seeded by the first's hits and the score neighbours lend
(shared.memory.second_step through MemorySearch), on both adapter sets (OpenSearch has its own in
tests/integration/test_second_step_osmem.py): a message that shares nothing with the question but
a name the first hits mention is found, only under a scope that admits it; a turn beside the best
match rises above a farther, equal one."""

from __future__ import annotations

import pytest

from shared.memory.scope import owner_scope, recall_scope
from shared.memory.search import MemorySearch
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, MemoryRecord, RecallScope
from tests.support.hashing_embedder import HashingEmbedder

from .builders import at
from .factories import ContractBackend

ADA = "ada"
CONVERSATION = "telegram.100"
# Far enough apart (more than the writer's two turns of context) that only a name links them.
TEXTS = [
    "This necklace is from my grandma, she lives in Sweden",
    "How lovely",
    "Work was busy today",
    "Same here, long meetings",
    "Did you eat yet",
    "Not yet, soon",
    "I miss the lakes of Sweden in summer",
    "What did you paint this weekend?",
    "A sunset over the harbour, with boats and gulls and a lighthouse far away on the hill",
    "Nice colours",
    "Thanks, the kids helped",
    "We watched a sunset too, sunset after sunset by the pier",
]


def _ada() -> RecallScope:
    return recall_scope(
        "personal", session_id="s1", conversation=CONVERSATION, group=False, user_aliases=(ADA,)
    )


def _bob() -> RecallScope:
    return recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=("bob",)
    )


class _World:
    def __init__(self, contract: ContractBackend, ws: str) -> None:
        self.backend = contract.backend
        self.ws = ws
        self.embedder = HashingEmbedder(64)
        records = [
            MemoryRecord(
                id=f"r{seq}",
                workspace_id=ws,
                session_id="s1",
                role="user" if seq % 2 == 0 else "assistant",
                text=text,
                seq=seq,
                created_at=at(seq),
                user_id=ADA,
                scope=owner_scope(CONVERSATION, [ADA], group=False),
            )
            for seq, text in enumerate(TEXTS)
        ]
        self.backend.memory.append_messages(ws, records)
        # No context: a turn is found by its own words here, so the neighbours' share is visible.
        MemoryWriter(self.backend.index, self.embedder, context_before=0, context_after=0).write_messages(
            ws, records
        )

    def found(
        self, query: str, *, scope: RecallScope = WORKSPACE_WIDE, mode: str = "bm25", **kw: object
    ) -> list[str]:
        engine = MemorySearch(self.backend.index, self.backend.memory, self.embedder, **kw)  # type: ignore[arg-type]
        outcome = engine.search(self.ws, query, scope=scope, k=10, tiers=["message"], mode=mode)  # type: ignore[arg-type]
        assert outcome.mode == mode and all(h.tier == "message" for h in outcome.hits)
        return [h.id for h in outcome.hits]


@pytest.fixture
def world(contract: ContractBackend, ws_a: str) -> _World:
    return _World(contract, ws_a)


def test_a_name_the_first_hits_mention_finds_a_message_the_question_does_not(world: _World) -> None:
    assert world.found("necklace grandma") == ["r0"]
    assert world.found("necklace grandma", feedback_weight=0.5) == ["r0", "r6"]
    # Hybrid: the second search runs with the Rocchio vector too, and the name still lifts it.
    hybrid = world.found("necklace grandma", mode="hybrid")
    with_feedback = world.found("necklace grandma", mode="hybrid", feedback_weight=0.5)
    assert hybrid[0] == with_feedback[0] == "r0"
    assert with_feedback.index("r6") < hybrid.index("r6")


def test_the_second_search_keeps_the_scope(world: _World) -> None:
    assert world.found("necklace grandma", scope=_ada(), feedback_weight=0.5) == ["r0", "r6"]
    assert world.found("necklace grandma", scope=_bob(), feedback_weight=0.5) == []


def test_a_turn_beside_the_best_match_rises_above_a_farther_equal_one(world: _World) -> None:
    before = world.found("paint sunset", neighbour_weight=0.0)
    assert before[0] == "r7" and before.index("r11") < before.index("r8")
    after = world.found("paint sunset", neighbour_weight=1.0)
    assert after[0] == "r7" and after.index("r8") < after.index("r11")
    assert world.found("paint sunset", scope=_bob(), neighbour_weight=1.0) == []
