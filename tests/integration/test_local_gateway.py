"""The local gateway (`sigil dev`'s app) on its real embedded backend: the lanes' dedup scope, one
gateway per data directory, the apology for an item dead-lettered as it is claimed, and what
`/stream` lets an unsigned header change.

Requests go through Starlette's TestClient to the real app; the queue is the real SQLite file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shared.adapters.embedded import Database, SqliteLanes
from shared.adapters.embedded import lanes as embedded_lanes
from shared.agent.turn import APOLOGY
from shared.channels import web
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import LaneItem, OutboundMessage

WORKSPACE = "default"
MAX_ATTEMPTS = 2


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, lane_max_attempts=MAX_ATTEMPTS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def gateway(data_dir: Path) -> Iterator[LocalGateway]:
    """A gateway whose app answers requests; its lane runner is not started."""
    gw = LocalGateway(_settings(data_dir))
    gw.ensure_workspace(WORKSPACE)
    try:
        yield gw
    finally:
        gw.stop()


def _secret(gw: LocalGateway) -> str:
    secret = gw.backend.secrets.get(web.secret_name(WORKSPACE))
    assert secret is not None
    return secret


def _body(session: str, event_id: str, text: str = "hello") -> bytes:
    return json.dumps({"event_id": event_id, "session": session, "user": "u1", "text": text}).encode()


def _post(client: TestClient, secret: str, session: str, event_id: str) -> str:
    body = _body(session, event_id)
    resp = client.post(f"/webhooks/web/{WORKSPACE}", content=body, headers=web.signed_headers(secret, body))
    assert resp.status_code == 202, resp.text
    status: str = resp.json()["status"]
    return status


# ---------------------------------------------------------------------- dedup per session (lane)


def test_the_same_event_id_in_another_session_is_queued_and_in_the_same_session_is_a_duplicate(
    gateway: LocalGateway,
) -> None:
    # Given two clients (sessions) that both number their events from e1, as the cloud's FIFO
    # queue (DeduplicationScope=messageGroup) dedups within a session's lane
    client, secret = TestClient(gateway.app()), _secret(gateway)
    # When each posts e1, and the first posts e1 again
    first = _post(client, secret, "s1", "e1")
    other_session = _post(client, secret, "s2", "e1")
    retried = _post(client, secret, "s1", "e1")
    # Then both sessions' messages are queued and only the retry is a duplicate
    assert (first, other_session, retried) == ("queued", "queued", "duplicate")
    lanes = gateway.backend.lanes
    assert isinstance(lanes, SqliteLanes)
    assert lanes.pending_count() == 2


def test_dedup_rows_written_before_the_per_lane_key_still_catch_their_retry(data_dir: Path) -> None:
    # Given a queue at the first schema (dedup workspace-wide) that has seen e1 in session s1
    data_dir.mkdir(parents=True)
    item = LaneItem(inbound=web.parse(WORKSPACE, _body("s1", "e1")))
    db = Database(data_dir / "queue.db")
    try:
        db.migrate("lanes", embedded_lanes._MIGRATIONS[:1])
        db.execute("INSERT INTO lane_dedup (dedup_id, seen_at) VALUES (?, ?)", (item.dedup_id, time.time()))
        # When the current code opens it (migrating the dedup table to the per-lane key)
        lanes = SqliteLanes(db)
        # Then the old row still makes the platform's retry a duplicate, and new events dedup per lane
        assert lanes.submit(item).status == "duplicate"
        fresh = [LaneItem(inbound=web.parse(WORKSPACE, _body(s, "e2"))) for s in ("s1", "s2", "s1")]
        assert [lanes.submit(i).status for i in fresh] == ["queued", "queued", "duplicate"]
    finally:
        db.close()


# ---------------------------------------------------------------------- one gateway per data dir


def test_a_second_gateway_on_the_same_data_dir_refuses_to_start_and_takes_back_nothing(
    data_dir: Path,
) -> None:
    # Given a running gateway whose lane holds an item in flight (its turn running)
    first = LocalGateway(_settings(data_dir))
    second: LocalGateway | None = None
    try:
        first.start()
        first.runner.stop()  # the first keeps its lock; only its consumer is paused
        lanes = first.backend.lanes
        assert isinstance(lanes, SqliteLanes)
        lanes.submit(LaneItem(inbound=web.parse(WORKSPACE, _body("s1", "e1"))))
        [head] = lanes._heads()
        assert lanes._claim(head.seq, MAX_ATTEMPTS) is not None
        # When a second gateway is started on the same directory
        second = LocalGateway(_settings(data_dir))
        with pytest.raises(RuntimeError) as refused:
            second.start()
        # Then it says which directory and which process hold it, and the item is still in flight
        message = str(refused.value)
        assert str(data_dir.resolve()) in message and f"pid {os.getpid()}" in message
        assert [h.status for h in lanes._heads()] == ["inflight"]
    finally:
        if second is not None:
            second.stop()
        first.stop()
    # And once the first has stopped, the directory is free again
    again = LocalGateway(_settings(data_dir))
    try:
        again.lock_data_dir()
    finally:
        again.stop()


# ---------------------------------------------------------------------- claim-time dead letters


def test_an_item_whose_attempts_were_used_up_by_crashes_gets_the_apology(data_dir: Path) -> None:
    # Given an item whose every attempt was claimed and never finished (the process died each time)
    gw = LocalGateway(_settings(data_dir))
    lanes = gw.backend.lanes
    assert isinstance(lanes, SqliteLanes)
    lanes.submit(LaneItem(inbound=web.parse(WORKSPACE, _body("s1", "killer", "the message that crashes"))))
    for _ in range(MAX_ATTEMPTS):
        lanes.recover_inflight()
        [head] = lanes._heads()
        assert lanes._claim(head.seq, MAX_ATTEMPTS) is not None
    try:
        # When the gateway starts again, takes it back and finds its attempts used up
        gw.start()
        assert gw.runner.wait_idle(30)
        # Then it is dead-lettered and the user gets the same apology as after a failed last attempt
        [dead] = lanes.dead_letters()
        assert "interrupted" in dead.error
        replies = gw.backend.outbox.read(WORKSPACE, web.session_id_for("s1"), after_seq=0)
        assert [(r.message.text, r.message.in_reply_to) for r in replies] == [(APOLOGY, "killer")]
    finally:
        gw.stop()


# ---------------------------------------------------------------------- /stream


def _put_replies(gw: LocalGateway, session: str, seqs: list[int]) -> None:
    for seq in seqs:
        gw.backend.outbox.append(
            OutboundMessage(
                workspace_id=WORKSPACE,
                session_id=web.session_id_for(session),
                channel="web",
                chat_id=session,
                turn_id=f"t{seq}",
                seq=seq,
                text=f"reply {seq}",
            )
        )


def _stream_ids(gw: LocalGateway, target: str, last_event_id: str | None = None) -> list[int]:
    headers = web.signed_headers(_secret(gw), target.encode())
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    with TestClient(gw.app()) as client, client.stream("GET", target, headers=headers) as resp:
        assert resp.status_code == 200
        return [int(line.removeprefix("id: ")) for line in resp.iter_lines() if line.startswith("id: ")]


def test_last_event_id_never_reads_before_the_signed_after(gateway: LocalGateway) -> None:
    # Given replies at seqs 1, 201 and 401, and a stream request signed for after=201
    _put_replies(gateway, "s1", [1, 201, 401])
    target = f"/sessions/{WORKSPACE}/s1/stream?after=201&timeout=0.5"
    # When the unsigned Last-Event-ID asks for less, more, or is not a seq
    # Then it can only move the start forward of what was signed, and a header that is no seq is a 400
    assert _stream_ids(gateway, target, last_event_id="0") == [401]
    assert _stream_ids(gateway, target, last_event_id="401") == []
    with TestClient(gateway.app()) as client:
        for bad in ("not-a-seq", str(2**64)):
            headers = {**web.signed_headers(_secret(gateway), target.encode()), "Last-Event-ID": bad}
            assert client.get(target, headers=headers).status_code == 400
    # And a reconnect of a stream signed from the start resumes after the last id it saw
    from_start = f"/sessions/{WORKSPACE}/s1/stream?timeout=0.5"
    assert _stream_ids(gateway, from_start) == [1, 201, 401]
    assert _stream_ids(gateway, from_start, last_event_id="201") == [401]


def test_stream_refuses_an_invalid_session_id_as_the_outbox_does(gateway: LocalGateway) -> None:
    client, secret = TestClient(gateway.app()), _secret(gateway)
    for route in ("stream?timeout=0.5", "outbox"):
        target = f"/sessions/{WORKSPACE}/-s1/{route}"
        resp = client.get(target, headers=web.signed_headers(secret, target.encode()))
        assert resp.status_code == 400, route
        assert resp.json() == {"error": "bad_request", "message": "invalid session id"}
