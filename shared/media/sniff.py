"""What a file is, from its bytes (docs/media.md): never from its name, and from the platform's
declared type only where the bytes agree.

`filetype` reads the signature at the start of the bytes (pure Python, no libmagic). Plain text
has no signature: bytes that decode as UTF-8 without control characters are text, and a declared
text/* subtype (text/csv, text/markdown) is kept for them. Containers that hold sound or pictures
alike (MP4, WebM, Ogg, 3GP) are audio when the platform declared audio: a voice note recorded by a
browser is WebM, an iPhone's memo M4A.
"""

from __future__ import annotations

from typing import Final

import filetype

from shared.models import Attachment, MediaKind

# How many leading bytes the signature matchers read (filetype's own default is 8192).
HEAD_BYTES: Final = 8192
OCTET_STREAM: Final = "application/octet-stream"

_DOCUMENTS: Final = frozenset(
    {
        "application/pdf",
        "application/rtf",
        "application/epub+zip",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.oasis.opendocument.text",
        "application/vnd.oasis.opendocument.spreadsheet",
        "application/vnd.oasis.opendocument.presentation",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    }
)
# Containers that carry sound alone as often as pictures, and their type when they hold sound.
_AV_CONTAINERS: Final = {
    "video/mp4": "audio/mp4",
    "video/webm": "audio/webm",
    "video/3gpp": "audio/3gpp",
    "audio/ogg": "audio/ogg",
    "audio/mp4": "audio/mp4",
}
# Image formats a model reads; the rest of image/* (Photoshop, DWG, raw camera files) is "other".
_IMAGES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/avif"})
# The platform's word for what it sends, for the check made before any byte is read.
_DECLARED_KINDS: Final[dict[str, MediaKind]] = {
    "photo": "image",
    "image": "image",
    "sticker": "image",
    "voice": "audio",
    "audio": "audio",
    "video": "video",
    "video_note": "video",
    "animation": "video",
    "document": "document",
}


def kind_of_mime(mime: str | None) -> MediaKind:
    if not mime:
        return "other"
    if mime in _IMAGES:
        return "image"
    if mime in _DOCUMENTS or mime.startswith("text/"):
        return "document"
    top = mime.split("/", 1)[0]
    if top == "audio":
        return "audio"
    if top == "video":
        return "video"
    return "other"


def declared_kind(attachment: Attachment) -> MediaKind:
    """The kind the platform says it is sending, for the size check before the download: its
    declared mime type first, else the platform's own kind ("photo", "voice"); "document" when
    neither says (Slack and Discord call every upload a file)."""
    by_mime = kind_of_mime(attachment.mime_type)
    if by_mime != "other":
        return by_mime
    return _DECLARED_KINDS.get(attachment.kind, "document")


def _is_text(head: bytes) -> bool:
    if not head or b"\x00" in head:
        return False
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the head's end is still text.
        if exc.start < len(head) - 4:
            return False
        text = head[: exc.start].decode("utf-8")
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f")
    return controls == 0


def sniff(data: bytes, declared_mime: str | None = None) -> tuple[MediaKind, str]:
    """The file's kind and mime type, read from `data`."""
    head = data[:HEAD_BYTES]
    found = filetype.guess(head)
    declared = (declared_mime or "").split(";", 1)[0].strip().lower()
    if found is not None:
        mime = found.mime
        if mime in _AV_CONTAINERS and declared.startswith("audio/"):
            return "audio", _AV_CONTAINERS[mime]
        return kind_of_mime(mime), mime
    if _is_text(head):
        mime = declared if declared.startswith("text/") else "text/plain"
        return "document", mime
    return "other", OCTET_STREAM
