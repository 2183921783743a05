"""The chat page's WebSocket (/ws) on the local gateway: browser tokens, live deltas, the outbox
as the source of truth on resume, token scope, refusals, and CORS for the page's origin only.

The real app through Starlette's TestClient, its real lanes and turns, and the real openai SDK
against tests/support/fake_openai.py streaming slowly (a marker in the message paces it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from shared.channels import web, web_tokens
from shared.channels.web_frames import MAX_SUBSCRIPTIONS
from shared.local.gateway import LocalGateway
from shared.models import BudgetLimits, OutboundMessage, ScopeLimits, new_workspace
from tests.support.local_gateway import gateway_on_fake_openai

WS = "default"
ORIGIN = "http://127.0.0.1:8787"


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    with gateway_on_fake_openai(tmp_path / "state", monkeypatch) as gw:
        yield gw


def token(gw: LocalGateway, user: str = "alice", sessions: list[str] | None = None, **kw: Any) -> str:
    workspace = kw.pop("workspace", WS)
    secret = gw.ensure_workspace(workspace)
    claims = web_tokens.claims_for(workspace, user, sessions or [f"{user}.*"], now=kw.pop("now", time.time()))
    return web_tokens.mint(secret, claims)


def frames_until(ws: Any, done: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while True:
        frame = ws.receive_json()
        seen.append(frame)
        if done(frame):
            return seen


def is_reply(frame: dict[str, Any]) -> bool:
    return bool(frame["type"] == "reply")


def test_a_message_streams_in_as_deltas_then_arrives_once_from_the_outbox(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    # Long enough for several redacted steps (shared.safety.redact.StreamRedactor: every 64 characters).
    text = " ".join(f"word{i}" for i in range(80)) + " [fake:pace=10]"
    with client.websocket_connect(f"/ws?token={token(gateway)}", headers={"origin": ORIGIN}) as ws:
        ready = ws.receive_json()
        assert ready["type"] == "ready" and ready["user"] == "alice" and ready["sessions"] == ["alice.*"]
        ws.send_json({"type": "resume", "session": "alice.1", "after": 0})
        ws.send_json({"type": "send", "event_id": "e1", "session": "alice.1", "text": text})
        seen = frames_until(ws, is_reply)
    accepted = [f for f in seen if f["type"] == "accepted"]
    assert accepted == [{"type": "accepted", "event_id": "e1", "session": "alice.1", "status": "queued"}]
    deltas = [f for f in seen if f["type"] == "delta"]
    # The fake echoes the message a word at a time: the page sees it grow in several steps.
    assert len(deltas) >= 3
    shown, lengths = "", []
    for d in deltas:
        shown = shown[: d["offset"]] + d["text"]
        lengths.append(len(shown))
    reply = seen[-1]
    # What streamed is the start of the reply (the redactor holds back a tail); the outbox has it all.
    assert reply["text"] == text and text.startswith(shown) and reply["seq"] >= 1
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
    assert {d["turn_id"] for d in deltas} == {reply["turn_id"]}
    # The sender is the token's user, as the session keeps it.
    session = gateway.backend.sessions.get(WS, web.session_id_for("alice.1"))
    assert session is not None and session.active_messages[0].sender_id == "alice"  # type: ignore[union-attr]


def test_resume_replays_the_outbox_after_a_seq_without_repeats(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    tok = token(gateway)
    with client.websocket_connect(f"/ws?token={tok}") as ws:
        ws.receive_json()
        ws.send_json({"type": "resume", "session": "alice.r", "after": 0})
        seqs = []
        for i in range(2):
            ws.send_json({"type": "send", "event_id": f"r{i}", "session": "alice.r", "text": f"m{i}"})
            seqs.append(frames_until(ws, is_reply)[-1]["seq"])
    # A new connection resuming after the first reply gets the second, once; after 0, both.
    with client.websocket_connect(f"/ws?token={tok}") as ws:
        ws.receive_json()
        ws.send_json({"type": "resume", "session": "alice.r", "after": seqs[0]})
        assert ws.receive_json() | {"created_at": None} == {
            "type": "reply", "session": "alice.r", "seq": seqs[1], "text": "m1", "final": True,
            "turn_id": ws_turn(gateway, "alice.r", seqs[1]), "part": 0, "in_reply_to": "r1",
            "created_at": None,
        }  # fmt: skip
        ws.send_json({"type": "resume", "session": "alice.r", "after": 0})
        again = [ws.receive_json()["seq"] for _ in range(2)]
    assert again == seqs


def ws_turn(gw: LocalGateway, session: str, seq: int) -> str:
    [entry] = [
        e for e in gw.backend.outbox.read(WS, web.session_id_for(session), after_seq=0) if e.seq == seq
    ]
    return entry.message.turn_id


def test_a_token_cannot_reach_another_session_or_workspace_or_claim_another_user(
    gateway: LocalGateway,
) -> None:
    client = TestClient(gateway.app())
    with client.websocket_connect(f"/ws?token={token(gateway, sessions=['s1'])}") as ws:
        ws.receive_json()
        ws.send_json({"type": "resume", "session": "s2", "after": 0})
        assert ws.receive_json()["code"] == "session_forbidden"
        ws.send_json({"type": "send", "event_id": "x", "session": "s2", "text": "hi"})
        refused = ws.receive_json()
        assert refused == {
            "type": "error", "code": "session_forbidden", "message": "this token does not cover that session",
            "event_id": "x", "session": "s2",
        }  # fmt: skip
        ws.send_json({"type": "send", "event_id": "y", "session": "s1", "text": "hi", "user": "mallory"})
        assert ws.receive_json()["code"] == "bad_request"
    assert gateway.backend.outbox.read(WS, web.session_id_for("s2"), after_seq=0) == []
    # A token of another workspace's secret, presented as this workspace's: a bad signature.
    other = token(gateway, workspace="other")
    forged = "v1." + web_tokens._b64(
        json.dumps(json.loads(web_tokens._unb64(other.split(".")[1])) | {"workspace": WS}).encode()
    ) + "." + other.split(".")[2]  # fmt: skip
    with client.websocket_connect(f"/ws?token={forged}") as ws:
        assert ws.receive_json()["code"] == "token_invalid"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 4401


def stored_reply(gw: LocalGateway, session: str, seq: int, text: str) -> None:
    """A reply in `session`'s outbox, as a turn stores it."""
    gw.backend.outbox.append(
        OutboundMessage(
            workspace_id=WS,
            session_id=web.session_id_for(session),
            channel="web",
            chat_id=session,
            turn_id=f"{session}-{seq}",
            seq=seq,
            text=text,
        )
    )


def test_a_users_own_sessions_never_cover_another_users_whose_id_extends_it(gateway: LocalGateway) -> None:
    # User ids may hold dots: `john`'s own sessions (`john.*`, what `sigil web token --user john`
    # grants) must not reach user `john.smith`'s `john.smith.main`, to read or to post.
    stored_reply(gateway, "john.smith.main", 1, "john.smith's reply")
    client = TestClient(gateway.app())
    with client.websocket_connect(f"/ws?token={token(gateway, 'john')}") as ws:
        assert ws.receive_json()["sessions"] == ["john.*"]
        ws.send_json({"type": "resume", "session": "john.smith.main", "after": 0})
        assert ws.receive_json()["code"] == "session_forbidden"
        ws.send_json({"type": "send", "event_id": "j1", "session": "john.smith.main", "text": "let me in"})
        assert ws.receive_json()["code"] == "session_forbidden"
        # While john's own conversation is his.
        ws.send_json({"type": "send", "event_id": "j2", "session": "john.main", "text": "mine"})
        assert ws.receive_json()["type"] == "accepted"
    [only] = gateway.backend.outbox.read(WS, web.session_id_for("john.smith.main"), after_seq=0)
    assert only.message.text == "john.smith's reply"
    assert gateway.backend.sessions.get(WS, web.session_id_for("john.smith.main")) is None
    # And john.smith's own token reaches it.
    with client.websocket_connect(f"/ws?token={token(gateway, 'john.smith')}") as ws:
        ws.receive_json()
        ws.send_json({"type": "resume", "session": "john.smith.main", "after": 0})
        assert ws.receive_json()["text"] == "john.smith's reply"


def test_a_connection_follows_as_many_sessions_as_in_the_cloud_the_oldest_dropped(
    gateway: LocalGateway,
) -> None:
    # Each followed session is read once a second: one connection may not make that unbounded.
    sessions = [f"alice.s{i}" for i in range(MAX_SUBSCRIPTIONS + 1)]
    first, last = sessions[0], sessions[-1]
    stored_reply(gateway, last, 1, "last, before")
    client = TestClient(gateway.app())
    with client.websocket_connect(f"/ws?token={token(gateway)}") as ws:
        ws.receive_json()
        for session in sessions:
            ws.send_json({"type": "resume", "session": session, "after": 0})
        # Resumes are taken in order: the last one's replay means every one before it was taken.
        assert ws.receive_json()["text"] == "last, before"
        stored_reply(gateway, first, 101, "first, after")
        stored_reply(gateway, last, 101, "last, after")
        # The once-a-second read goes through the followed sessions in the order they were
        # followed: had the first still been followed, its reply would come before the last's.
        seen = frames_until(ws, lambda f: f.get("text") == "last, after")
        assert [f["session"] for f in seen] == [last]
        # Following the first again drops the next oldest, and replays what the first missed.
        ws.send_json({"type": "resume", "session": first, "after": 0})
        assert ws.receive_json()["text"] == "first, after"


def test_an_expired_token_is_told_and_closed(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    stale = token(gateway, now=time.time() - 7200)
    with client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "auth", "token": stale})  # the token in the first frame works too
        assert ws.receive_json() == {
            "type": "error",
            "code": "token_expired",
            "message": "the token has expired",
        }
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()


def test_a_refused_sender_and_an_exhausted_budget_are_told_before_anything_is_queued(
    gateway: LocalGateway,
) -> None:
    gateway.backend.workspaces.put(
        new_workspace("closed", name="closed").model_copy(update={"unknown_sender_policy": "allow_list"})
    )
    gateway.backend.workspaces.put(
        new_workspace("tight", name="tight").model_copy(
            update={"budget": BudgetLimits(user=ScopeLimits(tokens_per_day=0))}
        )
    )
    client = TestClient(gateway.app())
    for workspace, code in (("closed", "sender_refused"), ("tight", "budget_exhausted")):
        with client.websocket_connect(f"/ws?token={token(gateway, workspace=workspace)}") as ws:
            ws.receive_json()
            ws.send_json({"type": "send", "event_id": "e1", "session": "alice.1", "text": "hi"})
            error = ws.receive_json()
        assert error["type"] == "error" and error["code"] == code and error["event_id"] == "e1", error
        assert gateway.backend.outbox.read(workspace, web.session_id_for("alice.1"), after_seq=0) == []


def test_cors_answers_the_pages_origin_only(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    pre = client.options(
        f"/webhooks/web/{WS}", headers={"origin": ORIGIN, "access-control-request-method": "POST"}
    )
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == ORIGIN
    evil = client.options(f"/webhooks/web/{WS}", headers={"origin": "https://evil.example"})
    assert evil.status_code == 403 and "access-control-allow-origin" not in evil.headers
    page = client.get(f"/sessions/{WS}/s1/outbox", headers={"origin": ORIGIN})
    assert page.status_code == 401 and page.headers["access-control-allow-origin"] == ORIGIN
    assert "*" not in page.headers.get("access-control-allow-origin", "")
    with (
        pytest.raises(WebSocketDisconnect) as refused,
        client.websocket_connect(f"/ws?token={token(gateway)}", headers={"origin": "https://evil.example"}),
    ):
        pass
    assert refused.value.code == 4403


def test_the_page_is_served_and_holds_no_secret(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    secret = gateway.ensure_workspace(WS)
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert secret not in page.text


def test_the_page_is_served_as_the_webhook_function_serves_it(gateway: LocalGateway) -> None:
    # The same files, config.json and headers as the stack's HTTP API (shared.ingress.http.page).
    client = TestClient(gateway.app())
    files = {path: client.get(path) for path in ("/", "/config.json", "/assets/app.js", "/assets/style.css")}
    assert {path: r.status_code for path, r in files.items()} == dict.fromkeys(files, 200)
    # No socket URL: the page connects to this gateway's own /ws.
    assert files["/config.json"].json() == {"websocket_url": None}
    assert files["/assets/app.js"].headers["content-type"].startswith("text/javascript")
    for r in files.values():
        policy = r.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self';" in policy
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
    assert files["/"].headers["cache-control"] == "no-cache"
    assert files["/assets/app.js"].headers["cache-control"] == "public, max-age=300"
    # Only the page's own files: a request never names a file to read.
    for path in (
        "/index.html",
        "/assets/index.html",
        "/assets/..%2Findex.html",
        "/assets/nope.js",
        "/secrets.json",
    ):
        assert client.get(path).status_code == 404, path


def test_deltas_are_redacted_as_they_stream_and_a_late_joiner_gets_the_text_so_far(
    gateway: LocalGateway,
) -> None:
    client = TestClient(gateway.app())
    key = "AKIA" + "Q" * 16  # an AWS access key id, as a model might repeat one
    words = [f"w{i}" for i in range(120)]
    words[20] = key
    text = " ".join(words) + " [fake:pace=50]"
    tok = token(gateway)
    with (
        client.websocket_connect(f"/ws?token={tok}") as first,
        client.websocket_connect(f"/ws?token={tok}") as late,
    ):
        first.receive_json()
        late.receive_json()
        first.send_json({"type": "resume", "session": "alice.k", "after": 0})
        first.send_json({"type": "send", "event_id": "k1", "session": "alice.k", "text": text})
        seen = frames_until(first, lambda f: f["type"] == "delta" and len(f["text"]) + f["offset"] > 200)
        # A second page joins mid-reply: its first frame is the reply so far, from offset 0.
        late.send_json({"type": "resume", "session": "alice.k", "after": 0})
        joined = late.receive_json()
        assert joined["type"] == "delta" and joined["offset"] == 0 and len(joined["text"]) > 200
        seen += frames_until(first, is_reply)
        rest = frames_until(late, is_reply)
    streamed = [f["text"] for f in [*seen, joined, *rest] if f["type"] in ("delta", "reply")]
    assert streamed and not any(key in t for t in streamed)
    assert "[REDACTED:aws_access_key]" in seen[-1]["text"] and seen[-1] == rest[-1]


def test_bad_frames_are_told_and_the_connection_stays_usable(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    with client.websocket_connect(f"/ws?token={token(gateway)}") as ws:
        ws.receive_json()
        for bad in (
            "not json",
            '{"type": "dance"}',
            '{"type": "send", "event_id": "e", "session": "alice.1"}',
        ):
            ws.send_text(bad)
            error = ws.receive_json()
            assert error["type"] == "error" and error["code"] == "bad_request", error
            assert bad not in error["message"]
        ws.send_bytes(b"\xff\xfe")
        assert ws.receive_json()["code"] == "bad_request"
        ws.send_json({"type": "resume", "session": "alice.1", "after": 0})
        ws.send_json({"type": "send", "event_id": "ok", "session": "alice.1", "text": "still here"})
        assert frames_until(ws, is_reply)[-1]["text"] == "still here"
