"""A photo sent to `sigil dev` and `sigil dev --aws` (docs/media.md): the Telegram webhook takes
the update, the turn fetches the photo from the fake Telegram's file API with the bot token set
by `sigil secret set`, stores it (the data dir; moto's media bucket under --aws), and the model's
answer reaches the chat. The fake model echoes the caption."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.media.ids import media_id
from tests.e2e.conftest import ROOT, DevGateway, gateway_env, wait_until
from tests.e2e.test_aws_mode import moto_client
from tests.integration.test_media_fetch import FILE_IDS, PHOTO
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_platforms import FakePlatforms

SIGIL = str(Path(sys.executable).parent / "sigil")
TELEGRAM_SECRET = "media-dev-telegram-secret"  # a test value, set by the test itself
CAPTION = "What is this plant?"


@pytest.fixture
def platforms() -> Iterator[FakePlatforms]:
    with FakePlatforms() as fake:
        yield fake


@pytest.mark.parametrize("mode", [[], ["--aws"]], ids=["embedded", "aws"])
def test_a_photo_sent_to_sigil_dev_is_fetched_stored_and_answered(
    mode: list[str], tmp_path: Path, fake_openai: FakeOpenAI, platforms: FakePlatforms
) -> None:
    platforms.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg")
    env = gateway_env(fake_openai) | {"SIGIL_PLATFORM_BASE_URLS": json.dumps(platforms.base_urls)}
    gw = DevGateway(tmp_path / "state", env, extra_args=mode).start()
    try:
        for name, value in (
            ("telegram/webhook-secret", TELEGRAM_SECRET),
            ("telegram/bot-token", platforms.tokens["telegram"]),
        ):
            stored = subprocess.run(
                [SIGIL, "secret", "set", name, "--data-dir", str(gw.data_dir)],
                check=False,
                cwd=ROOT,
                env=gw.env,
                input=value,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert stored.returncode == 0, stored.stderr
        update = (ROOT / "tests" / "fixtures" / "telegram" / "update_message_photo_caption.json").read_bytes()
        answer = httpx.post(
            f"{gw.url}/webhooks/telegram",
            content=update,
            headers={"content-type": "application/json", "x-telegram-bot-api-secret-token": TELEGRAM_SECRET},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert wait_until(lambda: any(CAPTION in s for s in platforms.shown("telegram")), timeout=120)
        # One lookup and one download, both with this bot's token
        [lookup] = platforms.calls("telegram", "getFile")
        [download] = platforms.downloads("telegram")
        assert platforms.tokens["telegram"] in lookup.path and platforms.tokens["telegram"] in download.path
        if not mode:
            # The data dir keeps the bytes, owner-only like the rest of it
            path = gw.data_dir / "media" / "default" / media_id("default", "telegram", FILE_IDS["telegram"])
            assert path.read_bytes() == PHOTO
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        else:
            # moto's media bucket keeps the bytes and the record, under the workspace's prefix
            s3 = moto_client(gw, "s3")
            item = media_id("default", "telegram", FILE_IDS["telegram"])
            body = s3.get_object(Bucket="sigil-local-media", Key=f"media/default/{item}/bytes")["Body"].read()
            assert body == PHOTO
            record = json.loads(
                s3.get_object(Bucket="sigil-local-media", Key=f"media/default/{item}/record.json")[
                    "Body"
                ].read()
            )
            assert (record["kind"], record["mime_type"]) == ("image", "image/png")
    finally:
        gw.stop()
