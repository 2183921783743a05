"""The local gateway's lane worker is freed by the turn's deadline (issue 14, finding 1).

`sigil dev` runs turns on a few lane workers; a model call that hangs used to hold its worker for
as long as the server kept the connection open, and every other session waited behind it. Each
turn now runs within SIGIL_TURN_TIMEOUT_S: the hung call is cut there, the attempt fails like any
provider failure (the lane retries it, then apologises), and the worker takes the next session.

The real gateway on its embedded backend, the real openai SDK against the local fake server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shared.channels import web
from shared.config import Settings
from shared.local.gateway import LocalGateway
from tests.support.fake_openai import FakeOpenAI

WORKSPACE = "default"
WAIT_S = 30.0  # the longest a test waits for a condition (a bound, never a sleep)


def wait_until(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def gateway(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(
        data_dir=tmp_path / "state",
        model="openai/fake-model",
        OPENAI_BASE_URL=fake.base_url,
        # One worker, so a hung turn would hold every session; a read timeout no test outlives.
        lane_workers=1,
        provider_timeout_s=60,
        provider_max_retries=0,
        turn_timeout_s=2,
    )
    gw = LocalGateway(settings)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def post(client: TestClient, secret: str, session: str, event_id: str, text: str) -> None:
    body = json.dumps({"event_id": event_id, "session": session, "user": "u1", "text": text}).encode()
    resp = client.post(f"/webhooks/web/{WORKSPACE}", content=body, headers=web.signed_headers(secret, body))
    assert resp.status_code == 202, resp.text


def replies(gw: LocalGateway, session: str) -> list[str]:
    return [
        e.message.text for e in gw.backend.outbox.read(WORKSPACE, web.session_id_for(session), after_seq=0)
    ]


def test_a_hung_model_call_frees_the_only_lane_worker_by_the_turns_deadline(
    gateway: LocalGateway, fake: FakeOpenAI
) -> None:
    client = TestClient(gateway.app())
    secret = gateway.backend.secrets.get(web.secret_name(WORKSPACE))
    assert secret is not None
    # Given a session whose message makes the model server hang after its stream's first event,
    # its turn running on the gateway's only lane worker
    post(client, secret, "stuck", "e1", "[fake:hang] are you there?")
    assert wait_until(lambda: len(fake.streams) == 1)
    # When another session posts a message
    post(client, secret, "other", "e2", "hello")
    # Then the hung call is cut at the turn's deadline (the server sees the client hang up) ...
    assert fake.streams[0].done.wait(WAIT_S) and fake.streams[0].client_closed
    # ... and the freed worker answers the other session
    assert wait_until(lambda: replies(gateway, "other") == ["hello"])
    # And the cut attempt is audited as a provider error that names the deadline
    errors = [r for r in gateway.backend.audit.list_records(WORKSPACE) if r.outcome == "error"]
    assert errors and errors[0].event_id == "e1"
    assert errors[0].error is not None and "deadline" in errors[0].error
