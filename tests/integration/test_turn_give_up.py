"""Giving up on a turn when the platform itself is out of reach, on the embedded (SQLite) backend.

The lane retries a turn whose reply cannot be sent and dead-letters it after its last attempt;
the dead-letter callback's apology then goes to the same unreachable platform. It must survive
that: one log line, no traceback, the user's message kept, and an audit record that says the turn
was given up and the apology could not be delivered. The real Telegram sender is pointed at a
closed local port (connection refused), the model is a function-backed fake.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.adapters.embedded import EmbeddedLaneRunner, SqliteLanes, build_embedded_backend
from shared.agent.batch import TurnRecord, give_up_on_last_deliveries
from shared.agent.turn import UNDELIVERED, TurnDeps, give_up_turn, run_turn
from shared.backend import Backend
from shared.channels.out import build_senders
from shared.config import Settings
from shared.models import InboundMessage, LaneItem, Sender
from shared.observability import metrics
from shared.providers.function import FunctionProvider
from tests.support.fake_platforms import DictSecrets

WS = "ws1"
SESSION = "telegram.42"
ATTEMPTS = 2
EVENTS = Path(__file__).resolve().parents[2] / "events"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


def closed_port() -> int:
    """A local port nothing listens on: a send there is refused at once (no route to the platform)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def telegram(event_id: str, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="telegram",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1", name="Ada"),
            chat_id="42",
            text=text,
        )
    )


def unreachable_telegram(backend: Backend, settings: Settings, http: httpx.Client) -> TurnDeps:
    """Turn deps whose Telegram sender has no route to its platform."""
    senders = build_senders(
        DictSecrets({"telegram/bot-token": "123456:test-token"}),
        outbox=backend.outbox,
        base_urls={"telegram": f"http://127.0.0.1:{closed_port()}"},
        http=http,
    )
    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=senders,
        provider_factory=lambda ref: (FunctionProvider(lambda request: "hello back"), "test-model"),
    )


def assert_given_up_undelivered(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """Each turn audited as given up, the apology noted as undelivered, and logged in one line."""
    undelivered = [r for r in caplog.records if r.getMessage() == "apology not delivered"]
    assert len(undelivered) == 2 and all(r.exc_info is None for r in undelivered)
    given_up = [r for r in backend.audit.list_records(WS) if r.outcome == "given_up"]
    assert sorted(r.event_id or "" for r in given_up) == ["e1", "e2"]
    assert all(r.error is not None and r.error.startswith(UNDELIVERED) for r in given_up)
    assert all("test-token" not in (r.error or "") for r in given_up)
    # And the user's messages are kept, so a retry of theirs reads as the next turn
    session = backend.sessions.get(WS, SESSION)
    assert session is not None
    assert [m.content for m in session.active_messages] == ["first", "second"]
    assert session.recent_event_ids == ["e1", "e2"]


def test_an_unreachable_platform_dead_letters_the_turn_and_audits_the_undelivered_apology(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path)
    lanes = backend.lanes
    assert isinstance(lanes, SqliteLanes)
    with httpx.Client(timeout=5) as http:
        # Given a Telegram sender with no route to its platform
        deps = unreachable_telegram(backend, settings, http)
        raised: list[BaseException] = []

        def tell(item: LaneItem) -> None:
            try:
                give_up_turn(deps, item)
            except BaseException as exc:
                raised.append(exc)
                raise

        # When two messages of the session run through the lanes, each failing every attempt
        lanes.submit(telegram("e1", "first"))
        lanes.submit(telegram("e2", "second"))
        runner = EmbeddedLaneRunner(
            lanes,
            lambda item: run_turn(deps, item),
            max_attempts=ATTEMPTS,
            backoff_s=0.01,
            max_backoff_s=0.05,
            on_dead_letter=tell,
        )
        with caplog.at_level(logging.WARNING), runner:
            assert runner.wait_idle(60)
    # Then both items are dead-lettered after their last attempt, as usual
    dead = lanes.dead_letters()
    assert sorted(d.item.inbound.event_id for d in dead if d.item is not None) == ["e1", "e2"]
    assert all(d.attempts == ATTEMPTS for d in dead)
    # And the dead-letter callback raised nothing: no traceback from it in the gateway's log
    assert raised == []
    assert not [r for r in caplog.records if "dead-letter callback failed" in r.getMessage()]
    # And each turn is audited as given up, with the apology noted as not delivered
    assert_given_up_undelivered(backend, caplog)


def last_delivery(item: LaneItem, raw: dict[str, Any]) -> TurnRecord:
    """The sample SQS record, carrying `item`, on the queue's last delivery (maxReceiveCount 5)."""
    attributes = {**raw["attributes"], "ApproximateReceiveCount": "5"}
    return TurnRecord.model_validate({**raw, "attributes": attributes, "body": item.model_dump_json()})


def test_the_cloud_batch_gives_up_on_every_record_when_the_apology_cannot_be_sent(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    # The batch adds to the process's powertools metrics, which no handler flushes here: left
    # behind, they would be published by the next test's handler.
    request.addfinalizer(metrics.clear_metrics)
    raw = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"]
    items = [telegram("e1", "first"), telegram("e2", "second")]
    records = [last_delivery(item, record) for item, record in zip(items, raw, strict=False)]
    with httpx.Client(timeout=5) as http, caplog.at_level(logging.WARNING):
        deps = unreachable_telegram(backend, Settings(data_dir=tmp_path), http)
        # When both records fail on their last delivery and the platform is out of reach
        give_up_on_last_deliveries(records, lambda: deps, 5)
    # Then each is given up, its apology's failure one line rather than a traceback, and the
    # second record got its try as well as the first
    assert not [r for r in caplog.records if r.exc_info is not None]
    given_up = [r for r in caplog.records if r.getMessage() == "turn given up on its last delivery"]
    assert [r.__dict__["apology"] for r in given_up] == ["undelivered", "undelivered"]
    assert_given_up_undelivered(backend, caplog)
