"""The WebSocket API's stand-in of `sigil dev --aws`: the events it builds against events/ws_*.json,
and a browser socket through it to the real ws function in its container, over moto in server
mode, with the management API's stand-in posting the answers back to the socket.

Starlette's TestClient speaks the WebSocket to the front in process (uvicorn's own WebSocket
support is the webpage branch's dependency); everything behind the front is what the mode runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from shared.channels import web, web_tokens
from shared.config import Settings
from shared.local.aws_mode.management_api import ManagementApi
from shared.local.aws_mode.resources import aws_client, container_environment, function_env, provision
from shared.local.aws_mode.servers import start_moto
from shared.local.aws_mode.ws_front import WsFront, ws_event
from shared.local.lambda_runtime import FunctionPool, FunctionSpec

EVENTS = Path(__file__).resolve().parents[2] / "events"
SECRET = "stand-in-web-secret"
REGION = "us-east-1"


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def shape(event: dict[str, Any]) -> tuple[set[str], set[str]]:
    return set(event), set(event["requestContext"])


@pytest.mark.parametrize(
    ("route", "sample"),
    [("$connect", "ws_connect.json"), ("$default", "ws_send.json"), ("$disconnect", "ws_disconnect.json")],
)
def test_each_event_has_the_samples_keys(route: str, sample: str) -> None:
    expected = load(sample)
    built = ws_event(
        route,
        "conn-1",
        query={"token": "t"} if route == "$connect" else None,
        headers={"host": "localhost"},
        body="{}" if route == "$default" else None,
    )
    keys, context = shape(built)
    sample_keys, sample_context = shape(expected)
    assert keys == sample_keys
    # API Gateway adds the close's code and reason to a $disconnect; the front has neither
    assert context == sample_context - {"disconnectStatusCode", "disconnectReason"}
    assert built["requestContext"]["eventType"] == expected["requestContext"]["eventType"]


@pytest.fixture(scope="module")
def front() -> Iterator[tuple[TestClient, str]]:
    moto = start_moto("127.0.0.1")
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    management = ManagementApi(stage="local").start()
    pool: FunctionPool | None = None
    try:
        resources = provision(
            endpoint,
            REGION,
            opensearch_endpoint="http://127.0.0.1:9",
            secrets_prefix="sigil/",
            max_receive_count=3,
            visibility_timeout_s=30,
        )
        aws_client("secretsmanager", endpoint, REGION).create_secret(
            Name="sigil/" + web.secret_name("default"), SecretString=SECRET
        )
        env = function_env(resources, "ws", Settings()) | {"SIGIL_WS_ENDPOINT": management.endpoint}
        spec = FunctionSpec(
            name="sigil-local-ws",
            handler="functions.ws.handler.lambda_handler",
            timeout_s=15.0,
            memory_mb=512,
            env=container_environment(env),
            region=REGION,
        )
        pool = FunctionPool(spec, max_containers=1)
        pool.start()
        pool.wait_ready()
        app = Starlette(routes=[WsFront(pool, management).route("/ws")])
        with TestClient(app) as client:
            yield client, resources.queue_url
    finally:
        if pool is not None:
            pool.kill()
            pool.stop(timeout_s=2.0)
        management.stop()
        moto.stop()


def token(secret: str = SECRET) -> str:
    return web_tokens.mint(secret, web_tokens.claims_for("default", "alice", ["demo"], now=time.time()))


def test_a_browser_authenticates_sends_and_is_answered_through_the_stand_ins(
    front: tuple[TestClient, str],
) -> None:
    client, _ = front
    with client.websocket_connect("/ws") as socket:
        socket.send_text(json.dumps({"type": "auth", "token": token()}))
        ready = socket.receive_json()
        assert (ready["type"], ready["user"], ready["sessions"]) == ("ready", "alice", ["demo"])
        socket.send_text(
            json.dumps({"type": "send", "event_id": "evt-standin", "session": "demo", "text": "hi"})
        )
        assert socket.receive_json() == {
            "type": "accepted",
            "event_id": "evt-standin",
            "session": "demo",
            "status": "queued",
        }
        socket.send_text(json.dumps({"type": "resume", "session": "other", "after": 0}))
        assert socket.receive_json()["code"] == "session_forbidden"


def test_a_bad_token_in_the_query_fails_the_handshake(front: tuple[TestClient, str]) -> None:
    client, _ = front
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect(f"/ws?token={token('wrong')}") as socket,
    ):
        socket.receive_json()


def test_a_forged_auth_frame_is_answered_then_the_socket_closed(front: tuple[TestClient, str]) -> None:
    client, _ = front
    with client.websocket_connect("/ws") as socket:
        socket.send_text(json.dumps({"type": "auth", "token": token("wrong")}))
        assert socket.receive_json()["code"] == "token_invalid"
        # The server deleted the connection: the socket is closed, as API Gateway closes it
        with pytest.raises(WebSocketDisconnect):
            socket.receive_json()
