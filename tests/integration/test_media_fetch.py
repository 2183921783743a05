"""Fetching attachments (docs/media.md) on both backends (files in the data dir; S3 on moto),
from the fake platforms' file APIs (tests/support/fake_platforms.py), with inbound messages
parsed by the real channel parsers from the platforms' payloads (tests/fixtures).

Per platform a photo with its caption is fetched with the route's credentials and stored with
the type its bytes say. A 100 MB file is refused from its declared size with no download; a
file that declares less than it is is cut off while streaming; a file id from another
workspace's chat is not fetched (its bot is not this route's bot); a second fetch of the same
message (a retried turn) downloads nothing.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shared.channels.discord import DiscordChannel
from shared.channels.inbound import Accepted, WebhookRequest
from shared.channels.routes import routed
from shared.channels.slack import SlackChannel
from shared.channels.telegram import TelegramChannel
from shared.channels.whatsapp import WhatsAppChannel
from shared.media.fetch import MediaFetcher
from shared.media.ids import media_id
from shared.models import ChannelRoute, InboundMessage, MediaLimits, WorkspaceConfig
from shared.ports import MediaStore, MediaUsage
from tests.contract.factories import BACKEND_FACTORIES
from tests.support.fake_platforms import DictSecrets, FakePlatforms

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG: signature, IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x10\x80\x20" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PHOTO = png()
# What the fixtures' platforms put in their events for the photo.
FILE_IDS = {
    "telegram": "AgACAgIAAxkBAAIBZ2VhS3m0AAH4Xw2Q1uQeAAGkXCvhAAIq0DEbw5oISV2xw1Cq8ChxAQADAgADeQADMwQ",
    "slack": "F0123ABCDEF",
    "discord": "1173364834476638208",
    "whatsapp": "1013859600285441",
}


def fixture(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / path).read_text())
    return data


def parsed(channel: Any, body: dict[str, Any]) -> InboundMessage:
    outcome = channel.parse(
        WebhookRequest(method="POST", target="/", headers={}, body=json.dumps(body).encode())
    )
    assert isinstance(outcome, Accepted), outcome
    (inbound,) = outcome.messages
    assert isinstance(inbound, InboundMessage)
    return inbound


def photo_message(
    platform: str, fake: FakePlatforms, ws: str, data: bytes = PHOTO, **served: Any
) -> InboundMessage:
    """The platform's photo-with-caption event, its file served by the fake, as the parser reads it."""
    if platform == "telegram":
        fake.add_file("telegram", FILE_IDS["telegram"], data, name="file.jpg", **served)
        return parsed(TelegramChannel(ws), fixture("telegram/update_message_photo_caption.json"))
    if platform == "slack":
        body = fixture("slack/event_message_file_share.json")
        url = fake.add_file("slack", FILE_IDS["slack"], data, name="plant.png", **served)
        body["event"]["files"][0]["url_private_download"] = url
        return parsed(SlackChannel(ws), body)
    if platform == "discord":
        body = fixture("discord/interaction_command_attachment.json")
        url = fake.add_file("discord", FILE_IDS["discord"], data, name="plant.png", **served)
        body["data"]["resolved"]["attachments"][FILE_IDS["discord"]]["url"] = url
        return parsed(DiscordChannel(ws), body)
    fake.add_file("whatsapp", FILE_IDS["whatsapp"], data, name="photo.jpg", **served)
    return parsed(WhatsAppChannel(ws), fixture("whatsapp/messages_image_notification.json"))


class Stores:
    def __init__(self, store: MediaStore, usage: MediaUsage) -> None:
        self.store = store
        self.usage = usage


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        assert contract.backend.media is not None and contract.backend.media_usage is not None
        yield Stores(contract.backend.media, contract.backend.media_usage)


@pytest.fixture
def fake() -> Iterator[FakePlatforms]:
    with FakePlatforms() as platforms:
        yield platforms


def fetch(
    fake: FakePlatforms,
    stores: Stores,
    inbound: InboundMessage,
    workspace: WorkspaceConfig | None = None,
    secrets: DictSecrets | None = None,
) -> Any:
    return MediaFetcher().fetch(
        store=stores.store,
        usage=stores.usage,
        secrets=secrets or DictSecrets.for_fake(fake),
        workspace=workspace or WorkspaceConfig(id=inbound.workspace_id),
        inbound=inbound,
        user_id="u-ada",
        base_urls=fake.base_urls,
        now=NOW,
    )


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord", "whatsapp"])
def test_a_photo_with_its_caption_is_fetched_and_stored_with_its_sniffed_type(
    platform: str, fake: FakePlatforms, stores: Stores
) -> None:
    inbound = photo_message(platform, fake, "ws1")
    assert inbound.text  # the caption is the message's text
    fetched = fetch(fake, stores, inbound)
    assert fetched.notes == []
    (item,) = fetched.items
    # The fixtures declare image/jpeg (WhatsApp, Telegram's photos) or image/png: the bytes decide.
    assert (item.kind, item.mime_type, item.size) == ("image", "image/png", len(PHOTO))
    assert item.id == media_id("ws1", platform, inbound.attachments[0].id or inbound.attachments[0].url or "")
    assert (item.workspace_id, item.user_id, item.session_id) == ("ws1", "u-ada", inbound.session_id)
    assert inbound.attachments[0].media_id == item.id
    assert stores.store.read("ws1", item.id) == PHOTO
    assert stores.usage.total("ws1", "2026-11-29") == len(PHOTO)
    (download,) = fake.downloads(platform)
    if platform in {"slack", "whatsapp"}:
        assert download.headers["authorization"] == f"Bearer {fake.tokens[platform]}"
    else:
        assert "authorization" not in download.headers


@pytest.mark.parametrize("platform", ["telegram", "slack", "whatsapp"])
def test_a_100_mb_file_is_refused_from_its_declared_size_before_any_download(
    platform: str, fake: FakePlatforms, stores: Stores
) -> None:
    inbound = photo_message(platform, fake, "ws1", declared_size=100_000_000)
    if platform == "slack":
        inbound.attachments[0].size = 100_000_000  # Slack declares it in the event itself
    fetched = fetch(fake, stores, inbound)
    assert fetched.items == []
    (note,) = fetched.notes
    assert "it is 100 MB, this workspace takes images up to 10 MB" in note
    assert fake.downloads(platform) == []
    assert stores.store.list_media("ws1") == []


@pytest.mark.parametrize("platform", ["telegram", "discord", "whatsapp"])
def test_a_file_that_lies_about_its_size_is_cut_off_while_streaming(
    platform: str, fake: FakePlatforms, stores: Stores
) -> None:
    # Declared 1 KB, and 11 MB of image on the wire, with no Content-Length to warn.
    big = png() + b"\x00" * 11_000_000
    inbound = photo_message(platform, fake, "ws1", big, declared_size=1000, hide_length=True)
    inbound.attachments[0].size = 1000
    fetched = fetch(fake, stores, inbound)
    assert fetched.items == []
    (note,) = fetched.notes
    assert "it is larger than the 10 MB this workspace takes for images" in note
    assert len(fake.downloads(platform)) == 1  # the download began, and stopped at the limit
    assert stores.store.list_media("ws1") == []
    assert stores.usage.total("ws1", "2026-11-29") == 0


def test_another_workspaces_file_id_is_not_fetched(fake: FakePlatforms, stores: Stores) -> None:
    # Workspace A's bot holds the photo; workspace B's route has its own bot and token.
    fake.extra_tokens["telegram"] = ["654321:OTHER-workspace-bot"]
    fake.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg")
    route = ChannelRoute(platform="telegram", name="family", workspace="ws-b")
    request = WebhookRequest(
        method="POST",
        target="/webhooks/telegram/family",
        headers={},
        body=json.dumps(fixture("telegram/update_message_photo_caption.json")).encode(),
    )
    # As the webhook delivers it: parsed, then routed to B (shared.channels.routes).
    outcome = routed(route, TelegramChannel("ws-b", route).parse(request))
    assert isinstance(outcome, Accepted)
    (inbound,) = outcome.messages
    assert inbound.reply_context["route"] == "family"
    secrets = DictSecrets({"telegram/family/bot-token": "654321:OTHER-workspace-bot"})
    fetched = fetch(fake, stores, inbound, secrets=secrets)
    assert fetched.items == []
    (note,) = fetched.notes
    assert "Telegram would not give this bot the file" in note and "wrong file_id" in note
    # The lookup went out with B's token only, and nothing was downloaded.
    (lookup,) = fake.calls("telegram", "getFile")
    assert "OTHER-workspace-bot" in lookup.path and fake.downloads("telegram") == []
    assert secrets.reads == ["telegram/family/bot-token"]
    # Had A stored it, B's id for the same file id is another id: never A's item.
    assert media_id("ws-b", "telegram", FILE_IDS["telegram"]) != media_id(
        "ws1", "telegram", FILE_IDS["telegram"]
    )


def test_a_retried_fetch_downloads_nothing_again(fake: FakePlatforms, stores: Stores) -> None:
    first = photo_message("telegram", fake, "ws1")
    (item,) = fetch(fake, stores, first).items
    again = parsed(TelegramChannel("ws1"), fixture("telegram/update_message_photo_caption.json"))
    (same,) = fetch(fake, stores, again).items
    assert same == item and again.attachments[0].media_id == item.id
    assert len(fake.calls("telegram", "getFile")) == 1 and len(fake.downloads("telegram")) == 1
    assert stores.usage.total("ws1", "2026-11-29") == len(PHOTO)


def test_the_days_total_and_the_kinds_a_workspace_takes(fake: FakePlatforms, stores: Stores) -> None:
    inbound = photo_message("telegram", fake, "ws1")
    small_day = WorkspaceConfig(id="ws1", media=MediaLimits(max_bytes_per_day=len(PHOTO) - 1))
    (note,) = fetch(fake, stores, inbound, small_day).notes
    assert (
        f"it is {len(PHOTO)} bytes, and this workspace has {len(PHOTO) - 1} bytes of files left today" in note
    )
    no_images = WorkspaceConfig(id="ws1", media=MediaLimits(kinds={"image": {"max_bytes": 1}}))
    (note,) = fetch(fake, stores, inbound, no_images).notes
    assert note == "I couldn't open the photo: this workspace doesn't take images."
    off = WorkspaceConfig(id="ws1", media=MediaLimits(enabled=False))
    assert fetch(fake, stores, inbound, off).notes == [
        "I couldn't open the photo: this workspace doesn't take files."
    ]
    assert fake.downloads("telegram") == [] and stores.store.list_media("ws1") == []


def test_a_voice_note_is_stored_as_audio_from_its_bytes(fake: FakePlatforms, stores: Stores) -> None:
    ogg = b"OggS\x00\x02" + b"\x00" * 20 + b"\x01\x13OpusHead" + b"\x00" * 200
    voice_id = fixture("telegram/update_message_voice.json")["message"]["voice"]["file_id"]
    fake.add_file("telegram", voice_id, ogg, name="file_1.oga")
    inbound = parsed(TelegramChannel("ws1"), fixture("telegram/update_message_voice.json"))
    (item,) = fetch(fake, stores, inbound).items
    assert (item.kind, item.mime_type) == ("audio", "audio/ogg")


def test_a_slack_file_needs_the_bot_token_and_a_sign_in_page_is_refused(
    fake: FakePlatforms, stores: Stores
) -> None:
    inbound = photo_message("slack", fake, "ws1")
    wrong = DictSecrets({"slack/bot-token": "xoxb-not-this-workspaces"})
    (note,) = fetch(fake, stores, inbound, secrets=wrong).notes
    assert "Slack answered with its sign-in page" in note
    assert stores.store.list_media("ws1") == []


def test_one_fetched_file_makes_the_aws_calls_the_cost_bench_prices(
    fake: FakePlatforms, tmp_path: Path
) -> None:
    from bench.cost import MEDIA_CALLS_PER_FILE
    from shared.adapters.aws.dynamodb.media_usage import DynamoMediaUsage
    from shared.adapters.aws.media import S3MediaStore

    with BACKEND_FACTORIES["aws"](tmp_path / "backend") as contract:
        store, usage = contract.backend.media, contract.backend.media_usage
        assert isinstance(store, S3MediaStore) and isinstance(usage, DynamoMediaUsage)
        calls: Counter[str] = Counter()
        for service, client in (("s3", store.client), ("dynamodb", usage.client)):
            client.meta.events.register(
                "before-call", lambda model, service=service, **_: calls.update([f"{service} {model.name}"])
            )
        inbound = photo_message("telegram", fake, "ws1")
        (item,) = fetch(fake, Stores(store, usage), inbound).items
        assert dict(calls) == MEDIA_CALLS_PER_FILE
        # Both objects under the workspace's prefix, encrypted at rest, the bytes typed as sniffed
        for name in ("bytes", "record.json"):
            head = store.client.head_object(Bucket=store.bucket, Key=f"media/ws1/{item.id}/{name}")
            assert head["ServerSideEncryption"] == "AES256"
        assert head["ContentType"] == "application/json"
        bytes_head = store.client.head_object(Bucket=store.bucket, Key=f"media/ws1/{item.id}/bytes")
        assert bytes_head["ContentType"] == "image/png"


def test_the_local_sweep_deletes_files_past_each_workspaces_retention(tmp_path: Path) -> None:
    from datetime import timedelta

    from shared.adapters.embedded import FileMediaStore, build_embedded_backend
    from shared.config import Settings
    from shared.models.media import MediaItem

    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    try:
        media = backend.media
        assert isinstance(media, FileMediaStore)

        def stored(ws: str, source: str, age_days: int) -> MediaItem:
            item = MediaItem(
                id=media_id(ws, "telegram", source),
                workspace_id=ws,
                session_id="s",
                user_id="u",
                channel="telegram",
                source_id=source,
                kind="image",
                mime_type="image/png",
                size=len(PHOTO),
                sha256="0" * 64,
                created_at=NOW - timedelta(days=age_days),
            )
            media.put(item, PHOTO)
            return item

        old, fresh = stored("ws1", "a", 31), stored("ws1", "b", 29)
        kept_longer = stored("ws2", "c", 31)
        workspaces = [
            WorkspaceConfig(id="ws1"),
            WorkspaceConfig(id="ws2", media=MediaLimits(retention_days=90)),
        ]
        assert media.sweep_expired(workspaces, NOW) == 1
        assert media.get("ws1", old.id) is None
        assert not (tmp_path / "media" / "ws1" / old.id).exists()
        assert media.read("ws1", fresh.id) == PHOTO and media.read("ws2", kept_longer.id) == PHOTO
    finally:
        backend.close()


def test_a_fetch_past_the_deadline_sends_nothing_and_says_so(fake: FakePlatforms, stores: Stores) -> None:
    import time

    from shared.deadline import deadline

    inbound = photo_message("telegram", fake, "ws1")
    with deadline(time.monotonic() - 1):
        fetched = fetch(fake, stores, inbound)
    assert fetched.items == []
    assert fetched.notes == ["I couldn't download the photo just now; please send it again in a moment."]
    assert fake.requests == []


def test_the_bot_token_in_telegrams_file_urls_never_reaches_the_logs(
    fake: FakePlatforms, stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    inbound = photo_message("telegram", fake, "ws1")
    assert len(fetch(fake, stores, inbound).items) == 1
    # httpx logs each request's URL: /bot<token>/getFile and /file/bot<token>/<path>
    assert any("/file/bot***/" in r.getMessage() for r in caplog.records)
    assert fake.tokens["telegram"] not in caplog.text
