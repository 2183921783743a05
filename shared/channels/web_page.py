"""The chat page's files (shared/channels/page/), as every front serves them: the local gateway, the
webhook Lambda behind the HTTP API, and `sigil dev --aws` through that same function.

The files are a fixed list read from this package, never a path taken from a request, so no
request can name a file outside it. The page learns where its WebSocket is from `config.json`
(`{"websocket_url": ...}`; null: the page's own origin at /ws, as the local gateway serves it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

PAGE_DIR: Final = Path(__file__).parent / "page"

# name under /assets/ → content type. Only these are ever served.
ASSETS: Final = {
    "app.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
HTML: Final = "text/html; charset=utf-8"
# The page and its config are read on every load, so a deploy shows at once; the assets are
# small and revalidated after five minutes (their names carry no version hash to cache forever).
NO_CACHE: Final = "no-cache"
ASSET_CACHE: Final = "public, max-age=300"


@dataclass(frozen=True)
class PageFile:
    body: str
    content_type: str
    cache_control: str


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def upload_origin(url: str) -> str | None:
    """The origin of the media bucket's presigned POSTs (https://bucket.s3.amazonaws.com, or moto's
    http://127.0.0.1:port under `sigil dev --aws`), which the page posts files to."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def content_security_policy(websocket_url: str | None, uploads_url: str | None = None) -> str:
    """Nothing but the page's own files; its socket at its own origin, or at `websocket_url`'s;
    files posted to its own origin, or to the media bucket's (`uploads_url`). Images also from
    `blob:` (a file being attached, read to draw its thumbnail) and `data:` (the thumbnails kept)."""
    connect = "'self'"
    for origin in (
        _origin(websocket_url) if websocket_url else None,
        upload_origin(uploads_url) if uploads_url else None,
    ):
        if origin:
            connect += f" {origin}"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
        "object-src 'none'"
    )


def security_headers(websocket_url: str | None, uploads_url: str | None = None) -> dict[str, str]:
    return {
        "content-security-policy": content_security_policy(websocket_url, uploads_url),
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
    }


def index() -> PageFile:
    return PageFile((PAGE_DIR / "index.html").read_text(encoding="utf-8"), HTML, NO_CACHE)


def asset(name: str) -> PageFile | None:
    """An asset by its name under /assets/, or None for any name that is not one of ASSETS."""
    content_type = ASSETS.get(name)
    if content_type is None:
        return None
    return PageFile((PAGE_DIR / "assets" / name).read_text(encoding="utf-8"), content_type, ASSET_CACHE)


def config(websocket_url: str | None) -> PageFile:
    body = json.dumps({"websocket_url": websocket_url or None})
    return PageFile(body, "application/json", NO_CACHE)
