"""What senders attached, in the console (docs/console.md, "Files"): a session's files with their
name, kind, size, sniffed type and, for an image, a thumbnail; a voice note's transcript or a
document's extracted text when the turn made one; and each user's count of files.

A thumbnail is served by the console itself (`GET /workspaces/{ws}/media/{id}`, behind the same
guard as every page: Host, Origin, launch secret), and only for an image of a type a browser shows
as a picture (never SVG, HTML or anything else a browser could run): its bytes with their sniffed
type, `nosniff` and a sandboxing Content-Security-Policy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from shared.console.html import esc, seg, table, when
from shared.media.fetch import human_size
from shared.models.media import MediaItem
from shared.ports import MediaStore

# What a thumbnail may be: raster formats a browser decodes and never runs.
SHOWN_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# How much of a transcript or extracted text a row shows before "more".
EXCERPT_CHARS: Final = 600


@dataclass(frozen=True)
class Thumbnail:
    body: bytes
    content_type: str


def session_files(store: MediaStore | None, workspace_id: str, session_id: str) -> str:
    """The "Files" section of a session's page."""
    if store is None:
        return '<p class="empty">no media store here (attachments are not kept)</p>'
    items = store.list_media(workspace_id, session_id=session_id)
    rows = [_row(workspace_id, item) for item in items]
    return table(
        ["file", "kind", "size", "type (sniffed)", "from", "received", "text"],
        rows,
        cls="media",
        empty="no files in this session",
    )


def _row(workspace_id: str, item: MediaItem) -> list[str]:
    name = esc(item.name or item.source_id)
    if item.kind == "image" and item.mime_type in SHOWN_TYPES:
        src = f"/workspaces/{seg(workspace_id)}/media/{seg(item.id)}"
        name = f'<img class="thumb" src="{src}" alt="{esc(item.name or "image")}" loading="lazy"><br>{name}'
    return [
        f'<span id="media-{esc(item.id)}">{name}</span>',
        esc(item.kind),
        esc(human_size(item.size)),
        f"<code>{esc(item.mime_type)}</code>",
        esc(item.user_id),
        esc(when(item.created_at)),
        _text(item),
    ]


def _text(item: MediaItem) -> str:
    if not item.text:
        return '<span class="empty">-</span>'
    what = {"transcript": "transcript", "extracted": "extracted text"}.get(item.text_source or "", "text")
    if len(item.text) <= EXCERPT_CHARS:
        return (
            f'<div class="media-text"><span class="hint">{esc(what)}</span><pre>{esc(item.text)}</pre></div>'
        )
    return (
        f'<details class="media-text"><summary>{esc(what)}: {esc(item.text[:EXCERPT_CHARS])}…</summary>'
        f"<pre>{esc(item.text)}</pre></details>"
    )


def counts_by_user(store: MediaStore | None, workspace_id: str) -> Counter[str]:
    """How many files each user has stored in the workspace (what erasing them removes)."""
    if store is None:
        return Counter()
    return Counter(item.user_id for item in store.list_media(workspace_id))


def thumbnail(store: MediaStore | None, workspace_id: str, media_id: str) -> Thumbnail | None:
    """An image's bytes to show; None for anything else, or an id of no file here."""
    if store is None:
        return None
    item = store.get(workspace_id, media_id)
    if item is None or item.kind != "image" or item.mime_type not in SHOWN_TYPES:
        return None
    data = store.read(workspace_id, media_id)
    return None if data is None else Thumbnail(data, item.mime_type)
