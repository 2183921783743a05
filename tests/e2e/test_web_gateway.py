"""Foundation I, end to end: signed web posts to the real `sigil dev`, a local OpenAI-wire model."""

from __future__ import annotations

import json
import time

import httpx

from shared.channels import web
from tests.e2e.conftest import DevGateway, gateway_env, turn_requests, wait_until
from tests.support.fake_openai import FakeOpenAI


def test_a_signed_post_yields_the_models_reply(gateway: DevGateway, fake_openai: FakeOpenAI) -> None:
    # Given the gateway with a model, when a signed message is posted
    resp = gateway.post("hello there", event_id="evt-1")
    # Then it is queued at once, and the model's reply (the fake echoes) arrives in the outbox
    assert resp.status_code == 202
    assert resp.json() == {"status": "queued", "event_id": "evt-1", "session": "s1"}
    [reply] = gateway.wait_replies(1)
    assert reply["text"] == "hello there"
    assert reply["in_reply_to"] == "evt-1"
    # and the model saw the system prompt and the user's message through the real openai SDK
    [request] = turn_requests(fake_openai)
    assert request["model"] == "fake-model"
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1] == {"role": "user", "content": "hello there"}

    # and the turn was logged in one line, without the message text (the line follows the commit,
    # which follows the reply: wait for it rather than read the log at once)
    def logged_turns() -> list[str]:
        return [line for line in gateway.log_text().splitlines() if "sigil.turn" in line]

    wait_until(lambda: bool(logged_turns()), timeout=120)
    turn_lines = logged_turns()
    assert len(turn_lines) == 1
    assert "outcome=ok" in turn_lines[0] and "hello there" not in turn_lines[0]


def test_the_reply_is_readable_as_server_sent_events(gateway: DevGateway) -> None:
    gateway.post("stream me", event_id="evt-sse")
    target = "/sessions/default/s1/stream?timeout=20"
    headers = web.signed_headers(gateway.secret, target.encode())
    with httpx.stream("GET", gateway.url + target, headers=headers, timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        # Deltas (event: delta, no id) may come first; the committed reply is what this reads.
        lines: list[str] = []
        for line in resp.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and "event: reply" in lines:
                break
    assert "id: 1" in lines
    data = json.loads(lines[-1].removeprefix("data: "))
    assert (data["text"], data["in_reply_to"], data["seq"]) == ("stream me", "evt-sse", 1)


def test_the_stream_carries_the_replys_deltas_over_the_wire_before_the_reply(gateway: DevGateway) -> None:
    # A reply the fake model writes a word at a time (tests/support/slow_streams.py's marker).
    text = " ".join(f"word{i}" for i in range(120)) + " [fake:pace=50]"
    target = "/sessions/default/s1/stream?timeout=120"
    headers = web.signed_headers(gateway.secret, target.encode())
    names: list[str] = []
    outbox_at_first_delta: list[dict[str, object]] | None = None
    with httpx.stream("GET", gateway.url + target, headers=headers, timeout=150) as resp:
        gateway.post(text, event_id="evt-deltas")
        event: list[str] = []
        for line in resp.iter_lines():
            if line:
                event.append(line)
                continue
            if not event or event[0].startswith(":"):
                event = []
                continue
            names.append(event[0])
            if event[0] == "event: delta" and outbox_at_first_delta is None:
                outbox_at_first_delta = gateway.outbox()
            if event[-2:-1] == ["event: reply"]:
                reply = json.loads(event[-1].removeprefix("data: "))
                assert event[0] == f"id: {reply['seq']}"
                break
            event = []
    # Through uvicorn as `sigil dev` serves it: deltas (without ids) while the outbox was still
    # empty, then the reply with its id.
    assert names[:-1] and set(names[:-1]) == {"event: delta"} and names[-1].startswith("id: ")
    assert outbox_at_first_delta == []
    assert reply["text"] == text and reply["in_reply_to"] == "evt-deltas"


def test_a_bad_signature_is_401_and_nothing_is_queued(gateway: DevGateway, fake_openai: FakeOpenAI) -> None:
    body = json.dumps({"event_id": "evt-bad", "session": "s1", "user": "u1", "text": "hi"}).encode()
    forged = web.signed_headers("not-the-secret", body)
    resp = gateway.post("", body=body, headers=forged)
    assert resp.status_code == 401
    assert resp.json() == {"error": "unauthorized", "message": "signature mismatch"}
    missing = gateway.post("", body=body, headers={})
    assert missing.status_code == 401
    # Then nothing was queued: a good message afterwards is the only turn the model ever sees
    gateway.post("the real one", event_id="evt-good")
    assert [r["in_reply_to"] for r in gateway.wait_replies(1)] == ["evt-good"]
    time.sleep(0.5)
    assert len(turn_requests(fake_openai)) == 1
    assert gateway.outbox() and len(gateway.outbox()) == 1


def test_a_stale_timestamp_is_401(gateway: DevGateway) -> None:
    body = json.dumps({"event_id": "evt-old", "session": "s1", "user": "u1", "text": "hi"}).encode()
    stale = web.signed_headers(gateway.secret, body, now=time.time() - 301)
    resp = gateway.post("", body=body, headers=stale)
    assert resp.status_code == 401
    assert "window" in resp.json()["message"]


def test_a_malformed_body_is_400_with_a_reason(gateway: DevGateway) -> None:
    not_json = gateway.post("", body=b"{not json")
    assert not_json.status_code == 400
    assert not_json.json() == {"error": "bad_request", "message": "body is not valid JSON"}
    no_text = gateway.post("", body=b'{"event_id":"e","session":"s1","user":"u1"}')
    assert no_text.status_code == 400
    assert "text" in no_text.json()["message"]


def test_the_same_event_id_three_times_is_one_turn_one_reply(
    gateway: DevGateway, fake_openai: FakeOpenAI
) -> None:
    statuses = [gateway.post("only once", event_id="evt-dup").json()["status"] for _ in range(3)]
    assert statuses == ["queued", "duplicate", "duplicate"]
    assert len(gateway.wait_replies(1)) == 1
    time.sleep(1.0)  # give a wrongly queued second turn the time to show itself
    assert len(gateway.outbox()) == 1
    assert len(turn_requests(fake_openai)) == 1


def test_after_a_restart_the_sessions_messages_are_still_in_its_window(
    gateway: DevGateway, fake_openai: FakeOpenAI
) -> None:
    for i in range(3):
        gateway.post(f"message {i}", event_id=f"evt-r{i}")
        gateway.wait_replies(i + 1)
    # When the gateway stops and starts again on the same state directory
    gateway.stop()
    gateway.start()
    gateway.post("after restart", event_id="evt-r3")
    assert len(gateway.wait_replies(4)) == 4
    # Then the model's request carries the earlier exchange from the stored window
    last = turn_requests(fake_openai)[-1]["messages"]
    contents = [m["content"] for m in last if m["role"] in ("user", "assistant")]
    assert contents == [
        "message 0",
        "message 0",
        "message 1",
        "message 1",
        "message 2",
        "message 2",
        "after restart",
    ]
    # and a duplicate of a message from before the restart is still recognised
    assert gateway.post("message 0", event_id="evt-r0").json()["status"] == "duplicate"


def test_with_no_model_configured_start_and_reply_say_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw = DevGateway(tmp_path / "state", gateway_env(None)).start()
    try:
        assert "model:    NOT CONFIGURED" in gw.log_text()
        gw.post("anyone there?", event_id="evt-nomodel")
        [reply] = gw.wait_replies(1)
        assert "No model is configured" in str(reply["text"])
        assert "SIGIL_MODEL" in str(reply["text"])
        assert httpx.get(gw.url + "/health").json()["model_configured"] is False
    finally:
        gw.stop()
