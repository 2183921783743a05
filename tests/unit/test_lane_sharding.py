"""Issue 30: the session-to-queue mapping of sharded lanes (shared.adapters.aws.sqs.lane_queue)
is stable, even, and moves only the sessions the new queues take when the count grows; and the
stable shards of the budget counters and audit records (shared.adapters.aws.dynamodb.table.shard_of)."""

from __future__ import annotations

from collections import Counter

import pytest

from shared.adapters.aws.dynamodb.table import shard_of
from shared.adapters.aws.sqs import jump_hash, lane_queue

SESSIONS = [f"ws{n % 7}.session-{n}" for n in range(20_000)]


def test_one_queue_takes_every_session() -> None:
    assert {lane_queue(s, 1) for s in SESSIONS} == {0}


def test_a_session_always_maps_to_the_same_queue() -> None:
    # A pure function of the group id: every webhook instance agrees, across cold starts.
    assert [lane_queue(s, 4) for s in SESSIONS[:500]] == [lane_queue(s, 4) for s in SESSIONS[:500]]
    # Pinned: a changed hash would move sessions with turns in flight, so a change must fail here.
    assert [lane_queue(f"ws1.s{n}", 4) for n in range(1, 9)] == [0, 1, 3, 1, 0, 1, 2, 1]
    assert [lane_queue(f"ws1.s{n}", 8) for n in range(1, 9)] == [7, 1, 3, 1, 4, 1, 2, 1]


@pytest.mark.parametrize("queues", [2, 3, 4, 8])
def test_sessions_spread_evenly_over_the_queues(queues: int) -> None:
    counts = Counter(lane_queue(s, queues) for s in SESSIONS)

    assert sorted(counts) == list(range(queues))
    expected = len(SESSIONS) / queues
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values())


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 3), (3, 4), (4, 8), (2, 5)])
def test_growing_the_queues_moves_only_the_new_queues_share_and_only_to_them(before: int, after: int) -> None:
    moved = [(lane_queue(s, before), lane_queue(s, after)) for s in SESSIONS]
    changed = [(old, new) for old, new in moved if old != new]

    # Only to a new queue: a session that moves never lands on a queue that already ran turns of
    # others, so the old queues keep exactly their sessions' order (docs/scale.md#sharded-lanes).
    assert all(new >= before for _, new in changed)
    # And only (after - before) / after of them: the least any even mapping can move.
    share = len(changed) / len(SESSIONS)
    assert abs(share - (after - before) / after) < 0.02


def test_jump_hash_refuses_no_buckets() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        jump_hash(1, 0)


def test_counter_and_audit_shards_are_stable_and_spread() -> None:
    counts = Counter(shard_of(s, 8) for s in SESSIONS)

    assert sorted(counts) == list(range(8))
    assert all(abs(c - len(SESSIONS) / 8) < 0.1 * len(SESSIONS) / 8 for c in counts.values())
    assert shard_of("s1", 8) == shard_of("s1", 8)
