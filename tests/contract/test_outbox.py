"""Outbox contract: per-session order, the (turn_id, part) send ledger, isolation."""

from __future__ import annotations

import threading

from shared.models import OutboundMessage

from .builders import at
from .factories import ContractBackend


def _reply(
    workspace_id: str, turn_id: str, part: int = 0, session_id: str = "s1", text: str = ""
) -> OutboundMessage:
    return OutboundMessage(
        workspace_id=workspace_id,
        session_id=session_id,
        channel="web",
        chat_id="chat-1",
        turn_id=turn_id,
        part=part,
        text=text or f"{turn_id} part {part}",
        in_reply_to="e1",
        final=part == 1,
        created_at=at(part),
    )


def test_append_numbers_a_sessions_entries_in_order(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    messages = [_reply(ws_a, "t1", 0), _reply(ws_a, "t1", 1), _reply(ws_a, "t2", 0)]
    entries = [outbox.append(m) for m in messages]

    assert all(e is not None for e in entries)
    seqs = [e.seq for e in entries if e is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [e.message for e in outbox.read(ws_a, "s1")] == messages
    assert outbox.read(ws_a, "s1") == entries


def test_read_pages_after_a_seq(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    entries = [outbox.append(_reply(ws_a, f"t{i}")) for i in range(5)]
    seqs = [e.seq for e in entries if e is not None]

    assert [e.seq for e in outbox.read(ws_a, "s1", after_seq=seqs[1])] == seqs[2:]
    assert [e.seq for e in outbox.read(ws_a, "s1", after_seq=seqs[1], limit=2)] == seqs[2:4]
    assert outbox.read(ws_a, "s1", after_seq=seqs[-1]) == []
    assert [e.seq for e in outbox.read(ws_a, "s1", limit=1)] == seqs[:1]


def test_the_same_turn_part_is_stored_once(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    first = outbox.append(_reply(ws_a, "t1", 0, text="original"))
    assert first is not None

    # A retried turn produces the same part again, possibly with other text: the ledger says no.
    assert outbox.append(_reply(ws_a, "t1", 0, text="retried")) is None
    assert outbox.append(_reply(ws_a, "t1", 1)) is not None

    assert [(e.message.part, e.message.text) for e in outbox.read(ws_a, "s1")] == [
        (0, "original"),
        (1, "t1 part 1"),
    ]


def test_sessions_have_their_own_sequences(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    outbox.append(_reply(ws_a, "t1", session_id="s1"))
    outbox.append(_reply(ws_a, "t2", session_id="s2"))
    outbox.append(_reply(ws_a, "t3", session_id="s1"))

    assert [e.message.turn_id for e in outbox.read(ws_a, "s1")] == ["t1", "t3"]
    assert [e.message.turn_id for e in outbox.read(ws_a, "s2")] == ["t2"]


def test_concurrent_appends_to_one_session_all_land_in_order(contract: ContractBackend, ws_a: str) -> None:
    outbox = contract.backend.outbox
    writers, per_writer = 4, 5
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        barrier.wait(timeout=10)
        for i in range(per_writer):
            assert outbox.append(_reply(ws_a, f"w{writer}-t{i}")) is not None

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    entries = outbox.read(ws_a, "s1", limit=100)
    assert len(entries) == writers * per_writer
    seqs = [e.seq for e in entries]
    assert seqs == sorted(set(seqs))
    for writer in range(writers):
        mine = [e.message.turn_id for e in entries if e.message.turn_id.startswith(f"w{writer}-")]
        assert mine == [f"w{writer}-t{i}" for i in range(per_writer)]


def test_a_workspace_never_reads_another_workspaces_outbox(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    outbox = contract.backend.outbox
    outbox.append(_reply(ws_a, "t1", text="for a only"))

    assert outbox.read(ws_b, "s1") == []
    # The ledger is per workspace too: b's turn t1 is not a's.
    entry = outbox.append(_reply(ws_b, "t1", text="b's reply"))
    assert entry is not None
    assert [e.message.text for e in outbox.read(ws_b, "s1")] == ["b's reply"]
    assert [e.message.text for e in outbox.read(ws_a, "s1")] == ["for a only"]
