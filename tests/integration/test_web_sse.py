"""The local gateway's signed event stream (GET /sessions/{workspace}/{session}/stream): the reply's
redacted deltas as the model writes them (`event: delta`, no id), then the stored reply
(`event: reply`, `id: {seq}`), one session's only, and a resume by Last-Event-ID.

The real app through Starlette's TestClient (which streams a response as the app writes it), its
real lanes and turns, and the real openai SDK against tests/support/fake_openai.py streaming slowly
(a `[fake:pace=MS]` marker in the message paces it, tests/support/slow_streams.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from shared.channels import web
from shared.local.gateway import LocalGateway
from tests.support.local_gateway import gateway_on_fake_openai

WS = "default"
DELTA_FIELDS = {"session", "turn_id", "part", "in_reply_to", "offset", "text"}
KEY = "AKIA" + "Q" * 16  # an AWS access key id, as a model might repeat one


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    with gateway_on_fake_openai(tmp_path / "state", monkeypatch) as gw:
        yield gw


@dataclass
class Event:
    name: str
    id: str | None
    data: dict[str, Any]
    raw: str  # the event's lines as sent, for byte-compatibility checks


def events(resp: httpx.Response) -> Iterator[Event]:
    """The stream's events as they arrive (comments, the keep-alives, skipped)."""
    lines: list[str] = []
    for line in resp.iter_lines():
        if line:
            if not line.startswith(":"):
                lines.append(line)
            continue
        if lines:
            fields = dict(ln.split(": ", 1) for ln in lines)
            yield Event(fields["event"], fields.get("id"), json.loads(fields["data"]), "\n".join(lines))
            lines = []


def open_stream(
    client: TestClient, gw: LocalGateway, session: str, *, workspace: str = WS, **params: str
) -> AbstractContextManager[httpx.Response]:
    query = "&".join(f"{k}={v}" for k, v in {"timeout": "120", **params}.items() if k != "last_event_id")
    target = f"/sessions/{workspace}/{session}/stream?{query}"
    headers = web.signed_headers(gw.ensure_workspace(workspace), target.encode())
    if "last_event_id" in params:
        headers["Last-Event-ID"] = params["last_event_id"]
    return client.stream("GET", target, headers=headers)


def post(
    client: TestClient, gw: LocalGateway, session: str, event_id: str, text: str, workspace: str = WS
) -> None:
    body = json.dumps({"event_id": event_id, "session": session, "user": "u1", "text": text}).encode()
    headers = web.signed_headers(gw.ensure_workspace(workspace), body)
    resp = client.post(f"/webhooks/web/{workspace}", content=body, headers=headers)
    assert resp.status_code == 202, resp.text


def until_reply(stream: Iterator[Event]) -> list[Event]:
    seen = []
    for event in stream:
        seen.append(event)
        if event.name == "reply":
            return seen
    raise AssertionError(f"the stream ended without a reply: {seen}")


def slow_text(tag: str, words: int, pace_ms: int = 50) -> str:
    """A message the fake echoes a word at a time, long enough for several redacted deltas
    (shared.safety.redact.StreamRedactor shows the text every 64 characters or so)."""
    return " ".join(f"{tag}{i}" for i in range(words)) + f" [fake:pace={pace_ms}]"


def shown(deltas: list[Event]) -> str:
    text = ""
    for d in deltas:
        text = text[: d.data["offset"]] + d.data["text"]
    return text


def test_a_reply_streams_as_redacted_deltas_before_its_reply_event(gateway: LocalGateway) -> None:
    words = slow_text("w", 120).split(" ")
    words[20] = KEY
    text = " ".join(words)
    outbox_when_first_delta: list[object] | None = None
    with TestClient(gateway.app()) as client, open_stream(client, gateway, "s1") as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        post(client, gateway, "s1", "e1", text)
        seen: list[Event] = []
        for event in events(resp):
            if event.name == "delta" and outbox_when_first_delta is None:
                outbox_when_first_delta = list(gateway.backend.outbox.read(WS, web.session_id_for("s1")))
            seen.append(event)
            if event.name == "reply":
                break
        outbox = client.get(
            f"/sessions/{WS}/s1/outbox",
            headers=web.signed_headers(gateway.ensure_workspace(WS), f"/sessions/{WS}/s1/outbox".encode()),
        ).json()["replies"]
    *deltas, reply = seen
    # Deltas came first, while the reply was still being written: nothing was in the outbox yet.
    assert len(deltas) >= 3 and {d.name for d in deltas} == {"delta"}
    assert outbox_when_first_delta == []
    # Each is the WebSocket's delta frame's fields, carries no id, and is this reply's.
    for d in deltas:
        assert d.id is None and set(d.data) == DELTA_FIELDS and "id:" not in d.raw
        assert (d.data["session"], d.data["turn_id"], d.data["in_reply_to"], d.data["part"]) == (
            "s1",
            reply.data["turn_id"],
            "e1",
            0,
        )
    # Redacted as they streamed: the key never appears in any delta, and what streamed is the
    # start of the stored (redacted) reply, growing step by step.
    assert not any(KEY in d.data["text"] for d in deltas)
    assert len(shown(deltas)) > len(" ".join(words[:21]))  # the stream went past the key
    assert reply.data["text"].startswith(shown(deltas))
    assert "[REDACTED:aws_access_key]" in reply.data["text"] and KEY not in reply.data["text"]
    # The reply event is as before: id, event, data lines, the data what the outbox route answers.
    [stored] = outbox
    assert reply.raw == f"id: {stored['seq']}\nevent: reply\ndata: {json.dumps(stored)}"


def test_a_stream_gets_its_own_sessions_deltas_only(gateway: LocalGateway) -> None:
    # Streams on s1, on s2, and on another workspace's s1 (the same name), all open while s1's
    # reply streams; then s2 and the other workspace's s1 get replies of their own.
    with (
        TestClient(gateway.app()) as client,
        open_stream(client, gateway, "s1") as own,
        open_stream(client, gateway, "s2") as other_session,
        open_stream(client, gateway, "s1", workspace="other") as other_workspace,
    ):
        post(client, gateway, "s1", "a1", slow_text("alpha", 60, pace_ms=20))
        mine = until_reply(events(own))
        post(client, gateway, "s2", "b1", slow_text("beta", 60, pace_ms=20))
        post(client, gateway, "s1", "c1", slow_text("gamma", 60, pace_ms=20), workspace="other")
        theirs = {
            "s2": ("b1", until_reply(events(other_session))),
            "other/s1": ("c1", until_reply(events(other_workspace))),
        }
    turn = mine[-1].data["turn_id"]
    assert [e.name for e in mine].count("delta") >= 2
    for name, (expected, seen) in theirs.items():
        # Each saw deltas of its own reply (so it was listening), and none of s1's.
        deltas = [e for e in seen if e.name == "delta"]
        assert deltas, name
        assert {(d.data["turn_id"], d.data["in_reply_to"]) for d in deltas} == {
            (seen[-1].data["turn_id"], expected)
        }, name
        assert all(e.data["turn_id"] != turn and "alpha" not in e.data["text"] for e in seen), name
    # And streams that ended leave no subscription behind in the hub.
    assert wait_until(lambda: not gateway.deltas._subscribers)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_reconnect_by_last_event_id_gets_the_replies_after_it_then_the_reply_in_flight(
    gateway: LocalGateway,
) -> None:
    with TestClient(gateway.app()) as client:
        seqs = []
        for i in range(2):
            with open_stream(client, gateway, "s1", after=str(seqs[-1] if seqs else 0)) as resp:
                post(client, gateway, "s1", f"m{i}", f"short {i}")
                seqs.append(int(until_reply(events(resp))[-1].id or 0))
        # A third reply starts streaming; the first stream drops after one delta of it.
        with open_stream(client, gateway, "s1", after=str(seqs[-1])) as resp:
            post(client, gateway, "s1", "m2", slow_text("late", 200))
            first = next(e for e in events(resp) if e.name == "delta")
        # When the client reconnects signed from the start, with the id of the first reply it has
        with open_stream(client, gateway, "s1", last_event_id=str(seqs[0])) as resp:
            stream = events(resp)
            resumed = until_reply(stream) + until_reply(stream)
    # Then it gets the second reply (committed), the third's text so far as one delta from offset
    # 0, the rest of it as deltas, then the third reply: each reply once, and ids only on replies.
    assert [(e.name, e.id) for e in resumed if e.name == "reply"] == [
        ("reply", str(seqs[1])),
        ("reply", resumed[-1].id),
    ]
    assert resumed[0].data["in_reply_to"] == "m1" and resumed[-1].data["in_reply_to"] == "m2"
    catch_up = resumed[1]
    assert catch_up.name == "delta" and catch_up.data["offset"] == 0
    assert catch_up.data["turn_id"] == first.data["turn_id"] == resumed[-1].data["turn_id"]
    assert len(catch_up.data["text"]) >= len(first.data["text"]) > 0
    deltas = [e for e in resumed if e.name == "delta"]
    assert all(e.id is None for e in deltas)
    assert resumed[-1].data["text"].startswith(shown(deltas))
    # A reconnect after the last reply, with nothing in flight, gets nothing until it times out.
    with (
        TestClient(gateway.app()) as client,
        open_stream(client, gateway, "s1", timeout="0.5", last_event_id=resumed[-1].id or "") as resp,
    ):
        assert resp.status_code == 200 and list(events(resp)) == []
