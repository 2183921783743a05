"""Media to the model through the real turn, the real SDKs (openai, anthropic, boto3) and the fake
providers, which record each request body (docs/media.md): a photo arrives in each provider's own
image format, a text-only model gets a note instead, a voice note arrives as its transcript (made
once, however often the turn is retried), and a PDF's text is quoted in its turn and found by
memory_search on the next."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.errors import ProviderError
from shared.media.content import PHOTO_NOT_SEEN, VOICE_PREFIX
from shared.models import Attachment, InboundMessage, LaneItem, Sender, WorkspaceConfig
from shared.providers import build_provider
from shared.providers.bedrock import bedrock_client
from shared.providers.capabilities import image_tokens
from shared.providers.transcription import OpenAITranscriber
from tests.support import moto_aws
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_bedrock import FakeBedrock
from tests.support.fake_openai import FakeOpenAI, FakeReply
from tests.support.fake_transcription import FakeTranscription
from tests.support.media_files import pdf, png, stored

WS = "ws1"
Json = dict[str, Any]


@dataclass
class Wire:
    model: str
    requests: list[Json]
    # The last user turn's image blocks as (MIME type, bytes), read from the body as sent.
    images: Callable[[Json], list[tuple[str, bytes]]]
    text: Callable[[Json], str]  # the last user turn's text


def _last_user(body: Json) -> Any:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def _openai_images(body: Json) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    content = _last_user(body)
    for part in [] if isinstance(content, str) else content:
        if part["type"] == "image_url":
            head, _, data = part["image_url"]["url"].partition(",")
            assert head.startswith("data:") and head.endswith(";base64")
            out.append((head[5:-7], base64.b64decode(data)))
    return out


def _openai_text(body: Json) -> str:
    content = _last_user(body)
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def _anthropic_images(body: Json) -> list[tuple[str, bytes]]:
    return [
        (b["source"]["media_type"], base64.b64decode(b["source"]["data"]))
        for b in _last_user(body)
        if b["type"] == "image" and b["source"]["type"] == "base64"
    ]


def _bedrock_images(body: Json) -> list[tuple[str, bytes]]:
    # Converse's JSON carries an image's bytes base64-encoded (boto3 encodes the blob).
    return [
        ("image/" + b["image"]["format"], base64.b64decode(b["image"]["source"]["bytes"]))
        for b in _last_user(body)
        if "image" in b
    ]


@pytest.fixture(params=["embedded", "aws"])
def any_backend(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Backend]:
    """Both adapter sets where the files are stored: the data dir, or S3 on moto (the memory
    index is the embedded one on both: tests.support.moto_aws.contract_backend)."""
    if request.param == "embedded":
        backend = build_embedded_backend(settings)
        try:
            yield backend
        finally:
            backend.close()
    else:
        with moto_aws.contract_backend(settings.data_dir) as (backend, _drain):
            yield backend


@pytest.fixture(params=["openai", "anthropic", "bedrock"])
def wire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Wire]:
    kind = request.param
    if kind == "openai":
        with FakeOpenAI(lambda body: "a fern") as fake:
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            yield Wire("openai/gpt-4.1-mini", fake.requests, _openai_images, _openai_text)
    elif kind == "anthropic":
        with FakeAnthropic(lambda body: "a fern") as fake:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
            text = lambda b: "".join(x.get("text", "") for x in _last_user(b))  # noqa: E731
            yield Wire("anthropic/claude-sonnet-4-6", fake.requests, _anthropic_images, text)
    else:
        with FakeBedrock() as fake:
            monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.base_url)
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
            monkeypatch.setenv("SIGIL_BEDROCK_REGION", "us-east-1")
            bedrock_client.cache_clear()
            text = lambda b: "".join(x.get("text", "") for x in _last_user(b))  # noqa: E731
            yield Wire("bedrock/anthropic.claude-sonnet-4-6-v1:0", fake.requests, _bedrock_images, text)
            bedrock_client.cache_clear()


def deps_for(backend: Backend, settings: Settings, **extra: Any) -> TurnDeps:
    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: build_provider(settings, ref),
        prices=PriceTable(),
        **extra,
    )


def item(event: str, text: str, attachments: list[Attachment]) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event,
            channel="web",
            workspace_id=WS,
            session_id="web.s1",
            sender=Sender(id="u-ada", name="Ada"),
            chat_id="s1",
            text=text,
            attachments=attachments,
        )
    )


def test_a_photo_reaches_each_provider_in_its_own_format(
    wire: Wire, backend: Backend, settings: Settings
) -> None:
    # Given a workspace on a model that sees images, and a photo the turn has fetched
    assert backend.media is not None
    backend.workspaces.put(WorkspaceConfig(id=WS, model=wire.model))
    photo = png(800, 600)
    attached = stored(backend.media, WS, photo, kind="image", mime_type="image/png", name="plant.png")
    deps = deps_for(backend, Settings(data_dir=settings.data_dir))
    # When the user asks about it
    record = run_turn(deps, item("e1", "what is this plant?", [attached]))
    # Then the provider got the photo's bytes as an image block of its own format, with the caption
    assert record.outcome == "ok"
    body = wire.requests[-1]
    assert wire.images(body) == [("image/png", photo)]
    assert "what is this plant?" in wire.text(body)
    # And the audit records the photo's estimated tokens by the provider's formula
    assert record.image_tokens == image_tokens(wire.model, 800, 600) > 0
    # And the session keeps the photo's id and size, never its bytes
    session = backend.sessions.get(WS, "web.s1")
    assert session is not None
    user = session.active_messages[0]
    assert user.kind == "user" and [i.media_id for i in user.images] == [attached.media_id]
    assert (user.images[0].width, user.images[0].height) == (800, 600)
    assert base64.b64encode(photo).decode()[:40] not in session.model_dump_json()
    # And on the next turn the photo is a note, not sent again
    run_turn(deps, item("e2", "and is it poisonous?", []))
    later = wire.requests[-1]
    assert all(wire.images({"messages": [m]}) == [] for m in later["messages"] if m["role"] == "user")
    assert "not shown again" in json.dumps(later["messages"])


def test_a_text_only_model_gets_a_note_instead_of_the_photo(
    any_backend: Backend, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a local model behind an OpenAI-compatible server, which the table does not know
    assert any_backend.media is not None
    with FakeOpenAI(lambda body: "I can't see it") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        any_backend.workspaces.put(WorkspaceConfig(id=WS, model="openai/llama3.2:3b"))
        attached = stored(
            any_backend.media, WS, png(64, 64), kind="image", mime_type="image/png", name="cat.png"
        )
        # When a photo comes
        record = run_turn(
            deps_for(any_backend, Settings(data_dir=settings.data_dir)), item("e1", "", [attached])
        )
    # Then the model got text only, with the note, and the turn answered
    assert record.outcome == "ok"
    content = _last_user(fake.requests[-1])
    assert isinstance(content, str) and PHOTO_NOT_SEEN in content
    assert record.image_tokens == 0


def test_an_operator_override_lets_a_local_model_see_images(
    any_backend: Backend, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any_backend.media is not None
    with FakeOpenAI(lambda body: "a cat") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("SIGIL_MODEL_CAPABILITIES", json.dumps({"openai/llava*": ["image"]}))
        any_backend.workspaces.put(WorkspaceConfig(id=WS, model="openai/llava:13b"))
        photo = png(64, 64)
        attached = stored(any_backend.media, WS, photo, kind="image", mime_type="image/png", name="cat.png")
        run_turn(deps_for(any_backend, Settings(data_dir=settings.data_dir)), item("e1", "", [attached]))
    assert _openai_images(fake.requests[-1]) == [("image/png", photo)]


def test_a_voice_note_reaches_the_model_as_its_transcript_made_once(
    any_backend: Backend, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any_backend.media is not None
    audio = b"OggS" + b"\x00" * 2000
    with (
        FakeOpenAI(lambda body: "noted") as fake,
        FakeTranscription("buy oat milk on the way home") as speech,
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        any_backend.workspaces.put(WorkspaceConfig(id=WS, model="openai/gpt-4.1-mini"))
        attached = stored(any_backend.media, WS, audio, kind="audio", mime_type="audio/ogg", name="voice.ogg")
        deps = deps_for(
            any_backend,
            Settings(data_dir=settings.data_dir),
            transcriber=OpenAITranscriber("whisper-1", "sk-test", speech.base_url),
        )
        # Given a first attempt whose model call fails after the transcription
        fake.fail(400)
        with pytest.raises(ProviderError):
            run_turn(deps, item("e1", "", [attached]))
        # When the lane retries the turn
        record = run_turn(deps, item("e1", "", [attached]))
    # Then the audio was transcribed once, through the real SDK's multipart upload
    assert len(speech.uploads) == 1
    upload = speech.uploads[0]
    assert upload.fields["model"] == "whisper-1" and upload.data == audio and upload.filename == "voice.ogg"
    # And the model read the transcript, marked as one
    text = _openai_text(fake.requests[-1])
    assert text == f"{VOICE_PREFIX} buy oat milk on the way home"
    # And the session keeps it as the message's text (so memory gets it when it rolls out)
    session = any_backend.sessions.get(WS, "web.s1")
    assert session is not None and session.active_messages[0].content == text
    # And the stored item has it, for any later retry
    media = any_backend.media.get(WS, attached.media_id or "")
    assert (
        media is not None
        and media.text_source == "transcript"
        and media.text == "buy oat milk on the way home"
    )
    # And the first attempt's minutes were charged with it (whisper-1 reports 7.5 s at $0.006/min)
    assert record.audio_seconds == 0.0  # the retry transcribed nothing
    assert record.outcome == "ok"


def test_a_pdf_is_quoted_in_its_turn_and_found_by_memory_search_a_turn_later(
    any_backend: Backend, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any_backend.media is not None
    document = pdf(["Quarterly report.", "The Lisbon office spent 4200 euros on coffee machines."])
    replies: list[str | FakeReply] = [
        "Summary: coffee machines.",
        FakeReply(tool_calls=[("memory_search", {"query": "coffee machines Lisbon"})]),
        "You spent 4200 euros.",
    ]
    with FakeOpenAI(lambda body: replies.pop(0)) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        any_backend.workspaces.put(WorkspaceConfig(id=WS, model="openai/gpt-4.1-mini"))
        attached = stored(
            any_backend.media, WS, document, kind="document", mime_type="application/pdf", name="q3.pdf"
        )
        deps = deps_for(any_backend, Settings(data_dir=settings.data_dir))
        # When the PDF is sent
        first = run_turn(deps, item("e1", "summarise this", [attached]))
        # Then its text reached the model quoted as untrusted data
        text = _openai_text(fake.requests[0])
        assert "4200 euros on coffee machines" in text and "summarise this" in text
        assert "document q3.pdf" in first.quoted
        # And the session keeps one line naming it, not its text
        session = any_backend.sessions.get(WS, "web.s1")
        assert session is not None
        assert "q3.pdf" in session.active_messages[0].content
        assert "4200" not in session.active_messages[0].content
        # When a later turn asks, and the model searches memory
        second = run_turn(deps, item("e2", "how much did we spend on coffee machines?", []))
    # Then memory_search found the PDF's text
    assert second.tools_used == ["memory_search"]
    tool_result = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "4200 euros on coffee machines" in tool_result
