"""Outbox contract: parts stored at the seq they carry, read in seq order; the seq is the send
ledger (a retried turn asks for the same one); a seq another turn holds is not a drop; isolation.

Seqs come from shared.agent.reply.reply_seq, as the turn makes them: increasing from turn to turn,
not contiguous.
"""

from __future__ import annotations

import threading

from shared.agent.reply import reply_seq
from shared.models import OutboundMessage, OutboxEntry

from .builders import at
from .factories import ContractBackend


def _reply(
    workspace_id: str,
    turn_id: str,
    count: int,
    part: int = 0,
    session_id: str = "s1",
    text: str = "",
) -> OutboundMessage:
    """Part `part` of turn `turn_id`, which started when the session held `count` messages."""
    return OutboundMessage(
        workspace_id=workspace_id,
        session_id=session_id,
        channel="web",
        chat_id="chat-1",
        turn_id=turn_id,
        part=part,
        seq=reply_seq(count, part),
        text=text or f"{turn_id} part {part}",
        in_reply_to="e1",
        final=part == 1,
        created_at=at(part),
    )


def _seqs(entries: list[OutboxEntry | None]) -> list[int]:
    return [e.seq for e in entries if e is not None]


def test_append_stores_each_part_at_its_seq_and_reads_in_order(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    # Turn t1 (2 parts) on a new session, then t2 once t1 committed its 2 messages
    messages = [_reply(ws_a, "t1", 0, 0), _reply(ws_a, "t1", 0, 1), _reply(ws_a, "t2", 2, 0)]
    entries = [outbox.append(m) for m in messages]

    assert _seqs(entries) == [1, 2, 201]
    assert [e.message.seq for e in entries if e is not None] == [1, 2, 201]
    assert [e.message for e in outbox.read(ws_a, "s1")] == messages
    assert outbox.read(ws_a, "s1") == entries


def test_read_pages_after_a_seq_across_gaps(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    seqs = _seqs([outbox.append(_reply(ws_a, f"t{i}", 2 * i)) for i in range(5)])
    assert seqs == [1, 201, 401, 601, 801]

    assert [e.seq for e in outbox.read(ws_a, "s1", after_seq=seqs[1])] == seqs[2:]
    assert [e.seq for e in outbox.read(ws_a, "s1", after_seq=seqs[1], limit=2)] == seqs[2:4]
    # A seq in a gap is as good a bookmark as one that was handed out
    assert [e.seq for e in outbox.read(ws_a, "s1", after_seq=seqs[1] + 50)] == seqs[2:]
    assert outbox.read(ws_a, "s1", after_seq=seqs[-1]) == []
    assert [e.seq for e in outbox.read(ws_a, "s1", limit=1)] == seqs[:1]


def test_the_same_turn_part_is_stored_once(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    first = outbox.append(_reply(ws_a, "t1", 0, 0, text="original"))
    assert first is not None

    # A retried turn produces the same part at the same seq, possibly with other text: the ledger says no.
    assert outbox.append(_reply(ws_a, "t1", 0, 0, text="retried")) is None
    assert outbox.append(_reply(ws_a, "t1", 0, 1)) is not None

    assert [(e.seq, e.message.part, e.message.text) for e in outbox.read(ws_a, "s1")] == [
        (1, 0, "original"),
        (2, 1, "t1 part 1"),
    ]


def test_a_seq_held_by_another_turn_is_not_a_drop(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    # Given turn t1 that sent two parts at count 4 and never committed (its retries gave up)
    outbox.append(_reply(ws_a, "t1", 4, 0))
    outbox.append(_reply(ws_a, "t1", 4, 1))
    # When the next turn, t2, starts from the same count and sends its two parts
    b0 = outbox.append(_reply(ws_a, "t2", 4, 0))
    b1 = outbox.append(_reply(ws_a, "t2", 4, 1))
    # Then they land after t1's, in order, each entry's message carrying the seq it landed at
    assert b0 is not None and b1 is not None
    assert (b0.seq, b0.message.seq, b1.seq, b1.message.seq) == (403, 403, 404, 404)
    assert [(e.message.turn_id, e.message.part) for e in outbox.read(ws_a, "s1")] == [
        ("t1", 0),
        ("t1", 1),
        ("t2", 0),
        ("t2", 1),
    ]
    # And t2 retried finds its parts where they landed: nothing is stored twice
    assert outbox.append(_reply(ws_a, "t2", 4, 0)) is None
    assert outbox.append(_reply(ws_a, "t2", 4, 1)) is None
    assert len(outbox.read(ws_a, "s1")) == 4


def test_sessions_have_their_own_sequences(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    outbox.append(_reply(ws_a, "t1", 0, session_id="s1"))
    outbox.append(_reply(ws_a, "t2", 0, session_id="s2"))
    outbox.append(_reply(ws_a, "t3", 2, session_id="s1"))

    assert [(e.seq, e.message.turn_id) for e in outbox.read(ws_a, "s1")] == [(1, "t1"), (201, "t3")]
    assert [(e.seq, e.message.turn_id) for e in outbox.read(ws_a, "s2")] == [(1, "t2")]


def test_concurrent_deliveries_of_one_turn_store_its_part_once(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    writers = 6
    barrier = threading.Barrier(writers)
    results: list[int | None] = []
    lock = threading.Lock()

    def append(writer: int) -> None:
        barrier.wait(timeout=10)
        entry = outbox.append(_reply(ws_a, "t1", 0, text=f"delivery {writer}"))
        with lock:
            results.append(entry.seq if entry else None)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert sorted(results, key=lambda r: r or 0) == [None] * (writers - 1) + [1]
    assert len(outbox.read(ws_a, "s1")) == 1


def test_concurrent_turns_asking_for_one_seq_all_land_in_order(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    # Turns that all started from the same count (none committed): their parts all collide
    writers, parts = 4, 3
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        barrier.wait(timeout=10)
        for part in range(parts):
            assert outbox.append(_reply(ws_a, f"w{writer}", 7, part)) is not None

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    entries = outbox.read(ws_a, "s1")
    assert len(entries) == writers * parts
    seqs = [e.seq for e in entries]
    assert seqs == sorted(set(seqs)) and seqs[0] == reply_seq(7, 0)
    for writer in range(writers):
        mine = [e.message.part for e in entries if e.message.turn_id == f"w{writer}"]
        assert mine == list(range(parts))


def test_a_workspace_never_reads_another_workspaces_outbox(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    outbox = contract.backend.outbox
    outbox.append(_reply(ws_a, "t1", 0, text="for a only"))

    assert outbox.read(ws_b, "s1") == []
    # The ledger is per workspace too: b's turn t1 at the same seq is not a's.
    entry = outbox.append(_reply(ws_b, "t1", 0, text="b's reply"))
    assert entry is not None and entry.seq == 1
    assert [e.message.text for e in outbox.read(ws_b, "s1")] == ["b's reply"]
    assert [e.message.text for e in outbox.read(ws_a, "s1")] == ["for a only"]


def test_delete_session_removes_every_entry_of_that_session_only(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    outbox = contract.backend.outbox
    for turn, count in (("t1", 0), ("t2", 2)):
        outbox.append(_reply(ws_a, turn, count, 0, session_id="s1"))
        outbox.append(_reply(ws_a, turn, count, 1, session_id="s1"))
    kept = outbox.append(_reply(ws_a, "t9", 0, session_id="s2"))
    theirs = outbox.append(_reply(ws_b, "t1", 0, session_id="s1"))

    assert outbox.delete_session(ws_a, "s1") == 4
    assert outbox.read(ws_a, "s1") == []
    assert outbox.read(ws_a, "s2") == [kept]
    assert outbox.read(ws_b, "s1") == [theirs]
    assert outbox.delete_session(ws_a, "s1") == 0
