"""The pure parts of media to model input (docs/media.md): the capability table and its
override, each provider's image-token formula against the examples its docs give, a photo's size
from its header, document extraction within max_pages/max_chars, and the transcription default."""

from __future__ import annotations

import pytest

from shared.config import Settings
from shared.media.extract import DOCX, XLSX, extract_text, readable
from shared.media.images import image_size
from shared.providers.capabilities import capabilities, image_tokens
from shared.providers.transcription import transcriber_from_settings
from tests.support.media_files import docx, pdf, png, xlsx


@pytest.mark.parametrize(
    ("ref", "sees"),
    [
        ("openai/gpt-4.1-mini", True),
        ("openai/gpt-4o", True),
        ("openai/o3-mini", False),
        ("openai/gpt-3.5-turbo", False),
        ("anthropic/claude-sonnet-4-6", True),
        ("anthropic/claude-3-5-haiku-latest", True),
        ("bedrock/us.anthropic.claude-sonnet-4-6-v1:0", True),
        ("bedrock/amazon.nova-lite-v1:0", True),
        ("bedrock/amazon.nova-micro-v1:0", False),
        ("openai/llama3.2:3b", False),  # a local model: text only unless the operator says so
        ("ollama/llava", False),
        ("function/test-model", True),  # the test model is handed the whole request
    ],
)
def test_the_capability_table(ref: str, sees: bool) -> None:
    assert capabilities(ref).image is sees


def test_an_override_wins_over_the_table() -> None:
    overrides = {"openai/llava*": ["image"], "openai/gpt-4o": []}
    assert capabilities("openai/llava:13b", overrides).image
    assert not capabilities("openai/gpt-4o", overrides).image


@pytest.mark.parametrize(
    ("ref", "size", "tokens"),
    [
        # OpenAI's vision guide: 1024x1024 -> 768x768, 4 tiles: 85 + 4 * 170
        ("openai/gpt-4o", (1024, 1024), 765),
        # 2048x4096 -> 768x1536, 6 tiles
        ("openai/gpt-4.1", (2048, 4096), 1105),
        # Patch models: 1024x1024 is 1024 patches; 1800x2400 is scaled to 1452 patches
        ("openai/gpt-4.1-mini", (1024, 1024), 1659),
        ("openai/gpt-4.1-mini", (1800, 2400), 2353),
        # Anthropic's vision guide: width * height / 750, 1000x1000 about 1334
        ("anthropic/claude-sonnet-4-6", (1000, 1000), 1334),
        # A large photo is scaled to ~1.15 megapixels first: about 1,600 tokens at most
        ("bedrock/anthropic.claude-sonnet-4-6-v1:0", (4032, 3024), 1534),
    ],
)
def test_image_tokens_follow_each_providers_formula(ref: str, size: tuple[int, int], tokens: int) -> None:
    assert image_tokens(ref, *size) == tokens


def test_a_photos_size_is_read_from_its_header() -> None:
    assert image_size(png(640, 480)) == (640, 480)
    assert image_size(b"GIF89a\x20\x00\x10\x00" + b"\x00" * 10) == (32, 16)
    jpeg = b"\xff\xd8\xff\xe0\x00\x04\x00\x00\xff\xc0\x00\x11\x08\x01\xe0\x02\x80\x03" + b"\x00" * 12
    assert image_size(jpeg) == (640, 480)
    assert image_size(b"not an image") is None


def test_a_pdf_is_cut_at_max_pages_with_a_note() -> None:
    out = extract_text(pdf([f"page {i}" for i in range(5)]), "application/pdf", max_pages=2, max_chars=10_000)
    assert out.text == "page 0\n\npage 1" and out.pages == 2
    assert out.note == "cut after 2 pages (this workspace's max_pages)"


def test_text_is_cut_at_max_chars_with_a_note() -> None:
    out = extract_text(b"x" * 5000, "text/csv", max_pages=10, max_chars=1200)
    assert len(out.text) == 1200 and out.note is not None and "max_chars" in out.note


def test_office_files_are_read_even_when_sniffed_as_a_zip() -> None:
    word = docx(["Meeting notes", "Buy a new kettle"])
    sheet = xlsx([["item", "cost"], ["kettle", 40]])
    assert readable("application/zip", word) == DOCX and readable("application/zip", sheet) == XLSX
    assert "Buy a new kettle" in extract_text(word, "application/zip", max_pages=5, max_chars=9999).text
    assert "kettle,40" in extract_text(sheet, XLSX, max_pages=5, max_chars=9999).text


def test_a_broken_file_is_a_note_not_an_error() -> None:
    out = extract_text(b"%PDF-1.4 broken", "application/pdf", max_pages=5, max_chars=9999)
    assert out.text == "" and out.note is not None and "could not be read" in out.note


def test_transcription_is_on_by_default_with_an_openai_key_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert transcriber_from_settings(Settings()) is None
    on = transcriber_from_settings(Settings(openai_api_key="sk-test"))
    assert on is not None and on.model_ref == "openai/gpt-4o-mini-transcribe"
    # A compatible chat server seldom transcribes: off unless named
    assert (
        transcriber_from_settings(Settings(openai_api_key="sk-test", openai_base_url="http://x/v1")) is None
    )
    named = transcriber_from_settings(
        Settings(transcription_model="openai/whisper-1", transcription_base_url="http://speech/v1")
    )
    assert named is not None and named.base_url == "http://speech/v1"
    assert transcriber_from_settings(Settings(openai_api_key="sk-test", transcription_model="none")) is None


def test_any_text_the_sniffer_kept_is_read_as_text() -> None:
    out = extract_text(b"<p>opening hours: 9 to 5</p>", "text/html", max_pages=5, max_chars=9999)
    assert out.text == "<p>opening hours: 9 to 5</p>" and out.note is None
    assert extract_text(b"\x00\x01", "application/octet-stream", max_pages=5, max_chars=9999).text == ""


@pytest.mark.parametrize(
    ("name", "mime", "sent_as"),
    [
        (None, "audio/ogg", "voice.ogg"),
        ("memo", "audio/mp4", "memo.m4a"),
        ("note.webm", "audio/webm", "note.webm"),
        ("recording.OGG", "audio/ogg", "recording.OGG"),
    ],
)
def test_a_voice_note_is_named_by_its_type_for_the_transcription_api(
    name: str | None, mime: str, sent_as: str
) -> None:
    from shared.media.content import _audio_filename
    from tests.support.media_files import stored_item

    assert _audio_filename(stored_item(name=name, mime_type=mime, kind="audio")) == sent_as


def test_extraction_stops_when_the_turns_deadline_draws_near() -> None:
    from shared.deadline import deadline, within

    # Less time left than the reserve the model call and the commit need: no page is read.
    with deadline(within(5.0)):
        out = extract_text(pdf(["one", "two"]), "application/pdf", max_pages=10, max_chars=9999)
    assert out.text == "" and out.note == "cut after 0 pages: the turn's time ran short"
