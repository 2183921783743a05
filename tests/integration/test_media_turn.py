"""Attachments through the agent turn (docs/media.md), on both backends, with the Telegram
photo event as the parser reads it, the fake platforms serving the file and posting the reply,
and a function-backed model that records what it was asked.

The turn fetches after admission and before the model call: the photo is stored and its
attachment names it; a refused file becomes a note at the top of the reply and in the message
the model reads, and the turn still commits; a retried turn does not download again; a refused
sender's turn fetches nothing and stores nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.inbound import Accepted, WebhookRequest
from shared.channels.out import build_senders
from shared.channels.telegram import TelegramChannel
from shared.config import Settings
from shared.errors import ProviderError
from shared.models import InboundMessage, LaneItem, UserMessage, WorkspaceConfig
from shared.providers.base import ChatRequest, Provider
from shared.providers.function import FunctionProvider
from tests.contract.factories import BACKEND_FACTORIES
from tests.integration.test_media_fetch import FILE_IDS, PHOTO
from tests.support.fake_platforms import FakeClock, FakePlatforms

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WS = "ws1"
CAPTION = "What is this plant?"
ANSWER = "It is a fern."


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend


@pytest.fixture
def fake() -> Iterator[FakePlatforms]:
    with FakePlatforms() as platforms:
        yield platforms


def photo_item() -> LaneItem:
    body = json.loads((FIXTURES / "telegram/update_message_photo_caption.json").read_text())
    request = WebhookRequest(
        method="POST", target="/webhooks/telegram", headers={}, body=json.dumps(body).encode()
    )
    outcome = TelegramChannel(WS).parse(request)
    assert isinstance(outcome, Accepted)
    (inbound,) = outcome.messages
    assert isinstance(inbound, InboundMessage)
    return LaneItem(inbound=inbound)


class Harness:
    def __init__(self, backend: Backend, fake: FakePlatforms, tmp_path: Path, answer: Any = ANSWER) -> None:
        self.backend, self.fake = backend, fake
        secrets: Any = backend.secrets  # both stores can set; the port only reads
        secrets.set("telegram/bot-token", fake.tokens["telegram"])
        self.model = FunctionProvider(answer if callable(answer) else lambda _request: answer)
        clock = FakeClock()
        self.deps = TurnDeps(
            backend=backend,
            settings=Settings(data_dir=tmp_path / "unused", platform_base_urls=fake.base_urls),
            senders=build_senders(
                backend.secrets, backend.outbox, base_urls=fake.base_urls, clock=clock, sleep=clock.sleep
            ),
            provider_factory=self.provider,
        )

    def provider(self, ref: str | None) -> tuple[Provider, str]:
        return self.model, "test-model"

    def asked(self) -> str:
        last = self.model.requests[-1].messages[-1]
        assert isinstance(last, UserMessage)
        return last.content

    def committed_user(self) -> str:
        session = self.backend.sessions.get(WS, photo_item().inbound.session_id)
        assert session is not None
        first = session.active_messages[0]
        assert isinstance(first, UserMessage)
        return first.content


def test_a_photo_is_stored_before_the_model_call_and_the_reply_is_the_models(
    backend: Backend, fake: FakePlatforms, tmp_path: Path
) -> None:
    fake.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg")
    harness = Harness(backend, fake, tmp_path)
    item = photo_item()
    record = run_turn(harness.deps, item)
    assert record.outcome == "ok"
    media = backend.media
    assert media is not None
    (stored,) = media.list_media(WS)
    assert (stored.kind, stored.mime_type, stored.user_id) == ("image", "image/png", record.user_id)
    assert item.inbound.attachments[0].media_id == stored.id
    # The model is asked the caption, and no note: nothing was refused.
    assert harness.asked() == CAPTION
    assert fake.shown("telegram") == [ANSWER]


def test_a_100_mb_photo_is_refused_with_a_clear_note_and_the_turn_still_commits(
    backend: Backend, fake: FakePlatforms, tmp_path: Path
) -> None:
    fake.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg", declared_size=100_000_000)
    harness = Harness(backend, fake, tmp_path)
    record = run_turn(harness.deps, photo_item())
    assert record.outcome == "ok"
    note = "I couldn't open the photo: it is 100 MB, this workspace takes images up to 10 MB."
    # The user reads the note above the model's answer ...
    assert fake.shown("telegram") == [f"{note}\n\n{ANSWER}"]
    # ... the model read it with the caption, and the session keeps the message as the model saw it.
    assert harness.asked().startswith(f"{CAPTION}\n\n[Sigil could not give you every file")
    assert note in harness.asked()
    assert harness.committed_user() == harness.asked()
    assert fake.downloads("telegram") == []
    media = backend.media
    assert media is not None and media.list_media(WS) == []


def test_a_retried_turn_does_not_download_again(
    backend: Backend, fake: FakePlatforms, tmp_path: Path
) -> None:
    fake.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg")
    attempts: list[ChatRequest] = []

    def flaky(request: ChatRequest) -> str:
        attempts.append(request)
        if len(attempts) == 1:
            raise ProviderError("the model is down")
        return ANSWER

    harness = Harness(backend, fake, tmp_path, flaky)
    with pytest.raises(ProviderError):
        run_turn(harness.deps, photo_item())
    # The lane delivers the item again: the stored file is found by its id.
    assert run_turn(harness.deps, photo_item()).outcome == "ok"
    assert len(fake.calls("telegram", "getFile")) == 1 and len(fake.downloads("telegram")) == 1
    media = backend.media
    assert media is not None and len(media.list_media(WS)) == 1


def test_a_refused_senders_turn_fetches_nothing(
    backend: Backend, fake: FakePlatforms, tmp_path: Path
) -> None:
    fake.add_file("telegram", FILE_IDS["telegram"], PHOTO, name="file.jpg")
    backend.workspaces.put(WorkspaceConfig(id=WS, unknown_sender_policy="allow_list"))
    harness = Harness(backend, fake, tmp_path)
    record = run_turn(harness.deps, photo_item())
    assert record.outcome == "sender_refused"
    assert fake.calls("telegram", "getFile") == [] and fake.downloads("telegram") == []
    media, usage = backend.media, backend.media_usage
    assert media is not None and media.list_media(WS) == []
    assert usage is not None and usage.total(WS, record.created_at.date().isoformat()) == 0
    assert harness.model.requests == []
