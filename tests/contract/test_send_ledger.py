"""SendLedger contract: every adapter (SQLite, DynamoDB on moto, memory) keeps the same rules."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.dynamodb import TABLE_SCHEMAS
from shared.adapters.aws.dynamodb.send_ledger import DynamoSendLedger
from shared.adapters.embedded.db import Database
from shared.adapters.embedded.send_ledger import SqliteSendLedger
from shared.channels.ledger import LEDGER_TTL_S, MemorySendLedger
from shared.ports import SendLedger, SentPiece

REGION = "us-east-1"
WEEK = LEDGER_TTL_S


class Now:
    """The ledgers' wall clock, moved by the tests."""

    def __init__(self) -> None:
        self.value = 1_700_000_000.0

    def __call__(self) -> float:
        return self.value


@contextlib.contextmanager
def sqlite_ledger(tmp_path: Path, now: Now) -> Iterator[SendLedger]:
    db = Database(tmp_path / "ledger.db")
    try:
        yield SqliteSendLedger(db, now=now)
    finally:
        db.close()


@contextlib.contextmanager
def dynamo_ledger(tmp_path: Path, now: Now) -> Iterator[SendLedger]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        # The sessions table exactly as the stack and the other adapters define it.
        client.create_table(TableName="sigil-sessions", **TABLE_SCHEMAS["sessions"])
        yield DynamoSendLedger("sigil-sessions", client=client, now=now)


@contextlib.contextmanager
def memory_ledger(tmp_path: Path, now: Now) -> Iterator[SendLedger]:
    yield MemorySendLedger(now=now)


FACTORIES: dict[str, Callable[[Path, Now], contextlib.AbstractContextManager[SendLedger]]] = {
    "embedded": sqlite_ledger,
    "aws": dynamo_ledger,
    "memory": memory_ledger,
}


@pytest.fixture
def now() -> Now:
    return Now()


@pytest.fixture(params=sorted(FACTORIES))
def ledger(request: pytest.FixtureRequest, tmp_path: Path, now: Now) -> Iterator[SendLedger]:
    with FACTORIES[request.param](tmp_path, now) as adapter:
        yield adapter


def test_an_unknown_piece_is_absent(ledger: SendLedger) -> None:
    assert isinstance(ledger, SendLedger)
    assert ledger.get("ws1", "t1", 0) is None


def test_a_recorded_piece_is_found(ledger: SendLedger) -> None:
    stored = ledger.record("ws1", "t1", 0, 0, message_id="m-100", text_digest="d1")
    assert stored == SentPiece("m-100", "d1")
    assert ledger.get("ws1", "t1", 0, 0) == SentPiece("m-100", "d1")


def test_the_first_record_wins(ledger: SendLedger) -> None:
    ledger.record("ws1", "t1", 0, 0, message_id="m-first", text_digest="d1")

    # A concurrent attempt recording the same piece learns the message already there.
    assert ledger.record("ws1", "t1", 0, 0, message_id="m-second", text_digest="d2") == SentPiece(
        "m-first", "d1"
    )
    assert ledger.get("ws1", "t1", 0, 0) == SentPiece("m-first", "d1")


def test_a_digest_update_keeps_the_message(ledger: SendLedger) -> None:
    ledger.record("ws1", "t1", 0, 0, message_id="m-1", text_digest="before")
    ledger.update_digest("ws1", "t1", 0, 0, text_digest="after")
    assert ledger.get("ws1", "t1", 0, 0) == SentPiece("m-1", "after")


def test_a_digest_update_never_creates_a_piece(ledger: SendLedger) -> None:
    ledger.update_digest("ws1", "t1", 0, 0, text_digest="orphan")
    assert ledger.get("ws1", "t1", 0, 0) is None


def test_every_key_part_separates_pieces(ledger: SendLedger) -> None:
    keys = [
        ("ws1", "t1", 0, 0),
        ("ws2", "t1", 0, 0),
        ("ws1", "t2", 0, 0),
        ("ws1", "t1", 1, 0),
        ("ws1", "t1", 0, 1),
    ]
    for i, (ws, turn, part, chunk) in enumerate(keys):
        ledger.record(ws, turn, part, chunk, message_id=f"m-{i}", text_digest=f"d-{i}")
    for i, (ws, turn, part, chunk) in enumerate(keys):
        assert ledger.get(ws, turn, part, chunk) == SentPiece(f"m-{i}", f"d-{i}")


def test_entries_expire_after_a_week(ledger: SendLedger, now: Now) -> None:
    ledger.record("ws1", "t1", 0, 0, message_id="m-old", text_digest="d")
    now.value += WEEK - 1
    assert ledger.get("ws1", "t1", 0, 0) is not None

    now.value += 2
    assert ledger.get("ws1", "t1", 0, 0) is None
    # An expired entry (not swept yet) no longer blocks a new record.
    assert ledger.record("ws1", "t1", 0, 0, message_id="m-new", text_digest="d") == SentPiece("m-new", "d")


def test_long_turn_ids_are_keys_too(ledger: SendLedger) -> None:
    long_a, long_b = "t" + "a" * 2000, "t" + "a" * 1999 + "b"
    ledger.record("ws1", long_a, 0, 0, message_id="m-a", text_digest="d")
    ledger.record("ws1", long_b, 0, 0, message_id="m-b", text_digest="d")
    assert ledger.get("ws1", long_a, 0, 0) == SentPiece("m-a", "d")
    assert ledger.get("ws1", long_b, 0, 0) == SentPiece("m-b", "d")


def test_the_dynamodb_item_layout(tmp_path: Path, now: Now) -> None:
    with dynamo_ledger(tmp_path, now) as ledger:
        assert isinstance(ledger, DynamoSendLedger)
        ledger.record("ws1", "t_abc", 2, 3, message_id="1700000000.000100", text_digest="d")
        [item] = ledger.client.scan(TableName=ledger.table)["Items"]
    assert item["pk"] == {"S": "WS#ws1#LEDGER#V#t_abc"}
    assert item["sk"] == {"S": "PART#000002#0003"}
    assert item["message_id"] == {"S": "1700000000.000100"}
    assert int(item["ttl"]["N"]) == int(now.value) + WEEK


def test_sqlite_sweeps_expired_entries_as_it_records(tmp_path: Path, now: Now) -> None:
    db = Database(tmp_path / "ledger.db")
    try:
        ledger = SqliteSendLedger(db, now=now)
        ledger.record("ws1", "t-old", 0, 0, message_id="m", text_digest="d")
        now.value += WEEK + 1
        ledger.record("ws1", "t-new", 0, 0, message_id="m", text_digest="d")
        assert [row[0] for row in db.query("SELECT turn_id FROM send_ledger")] == ["t-new"]
    finally:
        db.close()
