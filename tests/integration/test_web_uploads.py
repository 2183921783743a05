"""The chat page's uploads on the local gateway (shared.media.upload): a slot, the bytes, the file in
the data dir's MediaStore with its type sniffed from the bytes; refusals before a byte is sent
(declared size, kind, a refused sender) and while reading (a body larger than it said); and the
`send` frame naming the file, refused when the id is another workspace's, person's or session's.

The real app through Starlette's TestClient, its real stores, lanes and turns (the model is
tests/support/fake_openai.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from shared.channels import web
from shared.local.gateway import LocalGateway
from shared.models import MediaKindLimits, MediaLimits, new_workspace
from tests.integration.test_web_socket import token
from tests.support import upload_files
from tests.support.local_gateway import gateway_on_fake_openai

WS = "default"
ORIGIN = "http://127.0.0.1:8787"


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    with gateway_on_fake_openai(tmp_path / "state", monkeypatch) as gw:
        yield gw


def bearer(tok: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tok}"}


def upload(
    client: TestClient,
    tok: str,
    data: bytes,
    *,
    session: str = "alice.1",
    name: str = "photo.png",
    declared: str = "image/png",
    size: int | None = None,
    workspace: str = WS,
) -> Any:
    slot = client.post(
        f"/media/{workspace}/uploads",
        json={
            "session": session,
            "name": name,
            "size": len(data) if size is None else size,
            "type": declared,
        },
        headers=bearer(tok),
    )
    if slot.status_code != 200:
        return slot
    answer = slot.json()
    # The local gateway takes the bytes itself: no presigned form.
    assert answer["fields"] is None and answer["url"].startswith(f"/media/{workspace}/files?")
    return client.post(answer["url"], content=data, headers=bearer(tok) | {"content-type": declared})


def test_a_png_is_stored_with_its_type_sniffed_from_the_bytes(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    image = upload_files.png()
    # Named and declared as text: the type is what the bytes are, never the name or the browser's.
    got = upload(client, token(gateway), image, name="notes.txt", declared="text/plain")
    assert got.status_code == 200, got.text
    answer = got.json()
    assert answer["kind"] == "image" and answer["mime_type"] == "image/png"
    assert answer["size"] == len(image) and answer["name"] == "notes.txt"
    media = gateway.backend.media
    assert media is not None
    item = media.get(WS, answer["media_id"])
    assert item is not None
    assert (item.user_id, item.session_id, item.channel) == ("alice", "web.alice.1", "web")
    assert media.read(WS, item.id) == image


def test_a_file_too_large_is_refused_from_its_declared_size_before_any_byte(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    slot = client.post(
        f"/media/{WS}/uploads",
        json={"session": "alice.1", "name": "huge.png", "size": 100_000_000, "type": "image/png"},
        headers=bearer(token(gateway)),
    )
    assert slot.status_code == 413
    assert slot.json()["error"] == "media_refused"
    assert "huge.png is too large: 100 MB" in slot.json()["message"]
    assert gateway.backend.media is not None and gateway.backend.media.list_media(WS) == []


def test_a_body_larger_than_the_workspace_takes_is_cut_off_while_reading(gateway: LocalGateway) -> None:
    small = MediaLimits(
        kinds={"image": MediaKindLimits(max_bytes=2000), "document": MediaKindLimits(max_bytes=2000)}
    )
    gateway.backend.workspaces.put(new_workspace(WS).model_copy(update={"media": small}))
    client = TestClient(gateway.app())
    # Declared small, then 5 KB sent: refused at the limit, nothing kept.
    got = upload(client, token(gateway), upload_files.png() + b"\x00" * 5000, size=100)
    assert got.status_code == 413 and got.json()["error"] == "media_refused"
    assert gateway.backend.media is not None and gateway.backend.media.list_media(WS) == []


def test_a_kind_the_workspace_does_not_take_is_refused_after_sniffing(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    # Declared a document (which is taken); the bytes are a plain zip archive (kind "other": not).
    got = upload(client, token(gateway), upload_files.zip_archive(), name="a.docx", declared="")
    assert got.status_code == 413
    assert got.json()["message"] == "a.docx: this workspace does not take other files"


def test_uploads_need_a_token_that_covers_the_session(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    body = {"session": "alice.1", "name": "a.png", "size": 10, "type": "image/png"}
    assert client.post(f"/media/{WS}/uploads", json=body).status_code == 401
    bob = client.post(f"/media/{WS}/uploads", json=body, headers=bearer(token(gateway, "bob")))
    assert bob.status_code == 403 and bob.json()["error"] == "session_forbidden"
    direct = client.post(f"/media/{WS}/files?session=alice.1", content=upload_files.png())
    assert direct.status_code == 401


def test_nothing_is_stored_for_a_refused_sender(gateway: LocalGateway) -> None:
    closed = new_workspace("closed").model_copy(update={"unknown_sender_policy": "allow_list"})
    gateway.backend.workspaces.put(closed)
    client = TestClient(gateway.app())
    got = upload(client, token(gateway, workspace="closed"), upload_files.png(), workspace="closed")
    assert got.status_code == 403 and got.json()["error"] == "sender_refused"
    direct = client.post(
        "/media/closed/files?session=alice.1",
        content=upload_files.png(),
        headers=bearer(token(gateway, workspace="closed")),
    )
    assert direct.status_code == 403
    assert gateway.backend.media is not None and gateway.backend.media.list_media("closed") == []


def test_nothing_is_stored_for_a_sender_not_yet_paired(gateway: LocalGateway) -> None:
    pairing = new_workspace("pairs").model_copy(update={"unknown_sender_policy": "pairing"})
    gateway.backend.workspaces.put(pairing)
    client = TestClient(gateway.app())
    got = upload(client, token(gateway, workspace="pairs"), upload_files.png(), workspace="pairs")
    assert got.status_code == 403 and got.json()["error"] == "sender_refused"
    assert "approved" in got.json()["message"]
    assert gateway.backend.media is not None and gateway.backend.media.list_media("pairs") == []


def _send(client: TestClient, tok: str, frame: dict[str, Any]) -> dict[str, Any]:
    with client.websocket_connect(f"/ws?token={tok}", headers={"origin": ORIGIN}) as ws:
        assert ws.receive_json()["type"] == "ready"
        ws.send_json(frame)
        got: dict[str, Any] = ws.receive_json()
        return got


def test_a_message_names_its_files_and_only_its_senders_own(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    alice = token(gateway)
    media_id = upload(client, alice, upload_files.png()).json()["media_id"]

    def frame(event: str, session: str = "alice.1", **extra: Any) -> dict[str, Any]:
        return {
            "type": "send",
            "event_id": event,
            "session": session,
            "attachments": [{"media_id": media_id}],
        } | extra

    # A photo without a caption is a message.
    ok = _send(client, alice, frame("e1"))
    assert ok == {"type": "accepted", "event_id": "e1", "session": "alice.1", "status": "queued"}
    # The same file in another of alice's conversations, by bob, or in another workspace: refused
    # as a file that does not exist, with the event id so the page marks that message.
    other_session = _send(client, alice, frame("e2", session="alice.2"))
    assert other_session["code"] == "media_forbidden" and other_session["event_id"] == "e2"
    assert media_id in other_session["message"]
    bob = _send(client, token(gateway, "bob"), frame("e3", session="bob.1"))
    assert bob["code"] == "media_forbidden"
    elsewhere = _send(client, token(gateway, workspace="other"), frame("e4"))
    assert elsewhere["code"] == "media_forbidden"
    # Nothing at all: an empty message is still a bad request.
    empty = _send(client, alice, {"type": "send", "event_id": "e5", "session": "alice.1"})
    assert empty["code"] == "bad_request"


def test_more_files_than_a_message_may_carry_is_refused(gateway: LocalGateway) -> None:
    one = MediaLimits(max_files_per_message=1)
    gateway.backend.workspaces.put(new_workspace(WS).model_copy(update={"media": one}))
    client = TestClient(gateway.app())
    alice = token(gateway)
    ids = [upload(client, alice, upload_files.png(rgb=(i, i, i))).json()["media_id"] for i in (1, 2)]
    got = _send(
        client,
        alice,
        {
            "type": "send",
            "event_id": "e1",
            "session": "alice.1",
            "text": "two",
            "attachments": [{"media_id": i} for i in ids],
        },
    )
    assert got["code"] == "media_refused" and got["message"] == "at most 1 files on one message"


def test_the_signed_post_takes_no_attachments(gateway: LocalGateway) -> None:
    client = TestClient(gateway.app())
    secret = gateway.ensure_workspace(WS)
    message = {
        "event_id": "e1",
        "session": "s1",
        "user": "u1",
        "text": "hi",
        "attachments": [{"media_id": "m-1"}],
    }
    body = json.dumps(message).encode()
    got = client.post(f"/webhooks/web/{WS}", content=body, headers=web.signed_headers(secret, body))
    assert got.status_code == 400 and "browser protocol" in got.json()["message"]


def test_the_days_total_is_shared_with_the_platforms_fetches(gateway: LocalGateway) -> None:
    image = upload_files.png()
    room = MediaLimits(max_bytes_per_day=len(image) * 2 + 10)
    gateway.backend.workspaces.put(new_workspace(WS).model_copy(update={"media": room}))
    usage = gateway.backend.media_usage
    assert usage is not None
    client = TestClient(gateway.app())
    assert upload(client, token(gateway), image).status_code == 200
    # What a platform's fetch counted today (shared.media.fetch adds to the same total).
    day = datetime.now(UTC).date().isoformat()
    usage.add(WS, day, len(image))
    assert usage.total(WS, day) == 2 * len(image)
    refused = upload(client, token(gateway), upload_files.png(rgb=(1, 2, 3)))
    assert refused.status_code == 413
    assert "of files for today are used up" in refused.json()["message"]
