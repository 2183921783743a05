"""MediaStore contract, on every adapter set (files in the data directory; S3 on moto): a stored
file reads back with its record, an update rewrites the record and never the bytes, a workspace
never finds another's file by its id, and erasing a user removes their files and records only."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from shared.clock import utcnow
from shared.errors import BadRequest
from shared.media.ids import media_id
from shared.models.media import MediaItem
from shared.ports import MediaStore

from .factories import ContractBackend

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def item(ws: str, source_id: str, *, user: str = "u-alice", session: str = "s-1") -> MediaItem:
    data = PNG
    return MediaItem(
        id=media_id(ws, "telegram", source_id),
        workspace_id=ws,
        session_id=session,
        user_id=user,
        channel="telegram",
        source_id=source_id,
        kind="image",
        mime_type="image/png",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        name="plant.png",
    )


@pytest.fixture
def store(contract: ContractBackend) -> MediaStore:
    media = contract.backend.media
    assert media is not None, "every adapter set stores media"
    return media


def test_a_stored_file_reads_back_with_its_record(store: MediaStore, ws_a: str) -> None:
    photo = item(ws_a, "AgACAgIAAxkBAAIB")
    store.put(photo, PNG)
    assert store.get(ws_a, photo.id) == photo
    assert store.read(ws_a, photo.id) == PNG
    assert store.list_media(ws_a) == [photo]
    assert store.get(ws_a, media_id(ws_a, "telegram", "other")) is None
    assert store.read(ws_a, media_id(ws_a, "telegram", "other")) is None


def test_an_update_rewrites_the_record_and_keeps_the_bytes(store: MediaStore, ws_a: str) -> None:
    note = item(ws_a, "voice-1")
    store.put(note, PNG)
    transcribed = note.model_copy(update={"text": "buy milk", "text_source": "transcript"})
    store.update(transcribed)
    assert store.get(ws_a, note.id) == transcribed
    assert store.read(ws_a, note.id) == PNG
    # An item never stored is not created by an update (it has no bytes).
    ghost = item(ws_a, "never-put")
    store.update(ghost)
    assert store.get(ws_a, ghost.id) is None


def test_putting_the_same_file_again_keeps_one_copy(store: MediaStore, ws_a: str) -> None:
    photo = item(ws_a, "same")
    store.put(photo, PNG)
    store.put(photo, PNG)
    assert [i.id for i in store.list_media(ws_a)] == [photo.id]


def test_a_media_id_of_another_workspace_is_not_found(store: MediaStore, ws_a: str, ws_b: str) -> None:
    photo = item(ws_a, "AgACAgIAAxkBAAIB")
    store.put(photo, PNG)
    assert store.get(ws_b, photo.id) is None
    assert store.read(ws_b, photo.id) is None
    assert store.list_media(ws_b) == []
    assert store.delete_user(ws_b, "u-alice") == 0
    # The same platform file id in another workspace is another id altogether.
    assert media_id(ws_b, "telegram", "AgACAgIAAxkBAAIB") != photo.id
    assert store.read(ws_a, photo.id) == PNG


def test_lists_filter_by_user_and_session_oldest_first(store: MediaStore, ws_a: str) -> None:
    now = utcnow()
    first = item(ws_a, "f1", user="u-alice", session="s-1").model_copy(update={"created_at": now})
    second = item(ws_a, "f2", user="u-bob", session="s-1").model_copy(
        update={"created_at": now + timedelta(seconds=1)}
    )
    third = item(ws_a, "f3", user="u-alice", session="s-2").model_copy(
        update={"created_at": now + timedelta(seconds=2)}
    )
    for each in (third, first, second):
        store.put(each, PNG)
    assert [i.source_id for i in store.list_media(ws_a)] == ["f1", "f2", "f3"]
    assert [i.source_id for i in store.list_media(ws_a, user_id="u-alice")] == ["f1", "f3"]
    assert [i.source_id for i in store.list_media(ws_a, session_id="s-1")] == ["f1", "f2"]
    assert [i.source_id for i in store.list_media(ws_a, user_id="u-alice", session_id="s-2")] == ["f3"]


def test_delete_user_removes_their_files_and_records_only(store: MediaStore, ws_a: str, ws_b: str) -> None:
    alice = [item(ws_a, f"a{n}", user="u-alice") for n in range(3)]
    bob = item(ws_a, "b1", user="u-bob")
    alice_elsewhere = item(ws_b, "a1", user="u-alice")
    for each in [*alice, bob]:
        store.put(each, PNG)
    store.put(alice_elsewhere, PNG)
    assert store.delete_user(ws_a, "u-alice") == 3
    for each in alice:
        assert store.get(ws_a, each.id) is None
        assert store.read(ws_a, each.id) is None
    assert store.list_media(ws_a) == [bob]
    assert store.read(ws_a, bob.id) == PNG
    # Another workspace's files of the same user id are that workspace's to erase.
    assert store.read(ws_b, alice_elsewhere.id) == PNG
    assert store.delete_user(ws_a, "u-alice") == 0


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", ""])
def test_an_id_that_could_leave_the_prefix_is_refused(store: MediaStore, ws_a: str, bad: str) -> None:
    with pytest.raises(BadRequest):
        store.read(ws_a, bad)
    with pytest.raises(BadRequest):
        store.read(bad, "m-0123")


def test_the_days_usage_adds_up_per_workspace_and_day(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    usage = contract.backend.media_usage
    assert usage is not None, "every adapter set counts media"
    assert usage.total(ws_a, "2026-11-29") == 0
    assert usage.add(ws_a, "2026-11-29", 1000) == 1000
    assert usage.add(ws_a, "2026-11-29", 500) == 1500
    assert usage.add(ws_a, "2026-11-30", 7) == 7
    assert usage.total(ws_a, "2026-11-29") == 1500
    assert usage.total(ws_b, "2026-11-29") == 0
