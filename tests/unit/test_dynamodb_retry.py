"""The DynamoDB adapters' retry policy: what botocore does not retry (unprocessed batch items, a
cancelled transaction) is sent again, waiting only when nothing landed."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from shared.adapters.aws.dynamodb.retry import RETRIES, Next, until_done
from shared.adapters.aws.dynamodb.table import Table
from shared.errors import SigilError


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits of this test's own thread: another thread's sleeps (a daemon an earlier test
    started) are not the retry policy's."""
    slept: list[float] = []
    mine, sleep = threading.get_ident(), time.sleep

    def record(seconds: float) -> None:
        if threading.get_ident() == mine:
            slept.append(seconds)
        else:
            sleep(seconds)

    monkeypatch.setattr(time, "sleep", record)
    return slept


def test_backoff_doubles_and_progress_goes_at_once(waits: list[float]) -> None:
    # Given attempts that are throttled, make progress, are throttled again, then finish
    outcomes = iter([Next.BACK_OFF, Next.AGAIN, Next.BACK_OFF, Next.DONE])
    # When they run
    done = until_done(lambda: next(outcomes))
    # Then only the throttled ones wait, as the third attempt's backoff
    assert done
    assert waits == [0.05, 0.0, 0.2]


def test_gives_up_after_the_last_attempt(waits: list[float]) -> None:
    calls: list[int] = []

    def throttled() -> Next:
        calls.append(1)
        return Next.BACK_OFF

    assert not until_done(throttled)
    assert len(calls) == RETRIES
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_an_error_is_not_retried(waits: list[float]) -> None:
    def failing() -> Next:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        until_done(failing)
    assert waits == []


class FakeClient:
    """Answers batch writes and transactions from scripted replies, recording each request."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.requests: list[Any] = []

    def _next(self, request: Any) -> Any:
        self.requests.append(request)
        reply = self.replies.pop(0) if self.replies else {}
        if isinstance(reply, Exception):
            raise reply
        return reply

    def batch_write_item(self, RequestItems: Any) -> Any:
        return self._next(RequestItems["t"])

    def transact_write_items(self, TransactItems: Any) -> Any:
        return self._next([action["Put"]["Item"] for action in TransactItems])


def cancelled(*codes: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException"},
            "CancellationReasons": [{"Code": code} for code in codes],
        },
        "TransactWriteItems",
    )


def test_batch_write_resends_unprocessed_items(waits: list[float]) -> None:
    a, b = {"PutRequest": {"Item": {"pk": "a"}}}, {"PutRequest": {"Item": {"pk": "b"}}}
    client = FakeClient([{"UnprocessedItems": {"t": [b]}}, {}])
    Table("t", client, None).batch_write([a, b])
    assert client.requests == [[a, b], [b]]
    assert waits == [0.05]


def test_batch_write_that_never_lands_is_store_unavailable(waits: list[float]) -> None:
    a = {"PutRequest": {"Item": {"pk": "a"}}}
    client = FakeClient([{"UnprocessedItems": {"t": [a]}}] * RETRIES)
    with pytest.raises(SigilError) as raised:
        Table("t", client, None).batch_write([a])
    assert raised.value.code == "store_unavailable"
    assert len(client.requests) == RETRIES


def test_put_new_drops_what_is_stored_and_resends_the_rest_at_once(waits: list[float]) -> None:
    a, b = {"pk": {"S": "a"}}, {"pk": {"S": "b"}}
    client = FakeClient([cancelled("ConditionalCheckFailed", "None"), {}])
    Table("t", client, None).put_new([a, b])
    assert client.requests == [[a, b], [b]]
    assert not any(waits)
