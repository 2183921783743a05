"""What a file is, read from its bytes (shared.media.sniff): the signature decides, never the
name; text has no signature; a sound-only container declared as audio is audio; and the declared
kind of each platform's attachment, for the size check before the download."""

from __future__ import annotations

import pytest

from shared.media.fetch import human_size
from shared.media.sniff import declared_kind, sniff
from shared.models import Attachment

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 32
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"
OGG = b"OggS\x00\x02" + b"\x00" * 20 + b"\x01\x13OpusHead" + b"\x00" * 40
WEBM = b"\x1aE\xdf\xa3\x9fB\x86\x81\x01B\xf7\x81\x01B\xf2\x81\x04B\xf3\x81\x08B\x82\x84webm" + b"\x00" * 32


@pytest.mark.parametrize(
    ("data", "declared", "expected"),
    [
        (PNG, "image/jpeg", ("image", "image/png")),  # the bytes win over the declared type
        (JPEG, None, ("image", "image/jpeg")),
        (PDF, "image/png", ("document", "application/pdf")),
        (OGG, "audio/ogg", ("audio", "audio/ogg")),
        (WEBM, "audio/webm", ("audio", "audio/webm")),  # a browser's voice recording
        (WEBM, None, ("video", "video/webm")),
        (b"name,qty\nfern,2\n", "text/csv", ("document", "text/csv")),
        ("Grüße aus Köln\n".encode(), "image/png", ("document", "text/plain")),  # no text/* declared
        (b"\x00\x01\x02\x03binary", "application/pdf", ("other", "application/octet-stream")),
    ],
)
def test_the_kind_and_type_come_from_the_bytes(
    data: bytes, declared: str | None, expected: tuple[str, str]
) -> None:
    assert sniff(data, declared) == expected


def test_a_multibyte_character_cut_by_the_head_is_still_text() -> None:
    # One byte, then two-byte characters: the 8,192-byte head ends in the middle of one.
    text = ("a" + "é" * 5000).encode()
    with pytest.raises(UnicodeDecodeError):
        text[:8192].decode()
    assert sniff(text) == ("document", "text/plain")


@pytest.mark.parametrize(
    ("attachment", "kind"),
    [
        (Attachment(kind="photo", id="x"), "image"),
        (Attachment(kind="voice", id="x", mime_type="audio/ogg"), "audio"),
        (Attachment(kind="file", id="x", mime_type="image/png"), "image"),
        (Attachment(kind="file", id="x"), "document"),
        (Attachment(kind="video_note", id="x"), "video"),
        (Attachment(kind="document", id="x", mime_type="application/pdf"), "document"),
    ],
)
def test_the_declared_kind_for_the_check_before_the_download(attachment: Attachment, kind: str) -> None:
    assert declared_kind(attachment) == kind


def test_sizes_read_as_the_platforms_state_their_limits() -> None:
    assert [human_size(n) for n in (100_000_000, 20_000_000, 2_500_000, 48_213, 70)] == [
        "100 MB",
        "20 MB",
        "2.5 MB",
        "48 KB",
        "70 bytes",
    ]
