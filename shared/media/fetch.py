"""Fetching what a sender attached into the MediaStore, in the agent turn (docs/media.md).

Never in the webhook, which stays one SendMessage: the turn fetches after the sender is
admitted (a refused sender's files are never downloaded, nothing of theirs is stored) and before
the model call, so a retried turn fetches again where the first attempt failed.

Per attachment, in order, each check before any byte is read where it can be:
- the workspace takes files at all (MediaLimits.enabled), and no more than
  `max_files_per_message` of one message;
- already stored: its id is derived from the workspace, the platform and the platform's file id
  (shared.media.ids), so a retried turn finds it and downloads nothing, and another workspace's
  store never has it;
- the declared kind's size limit against the size the platform declared (in the event, or from
  its file API: Telegram's getFile, WhatsApp's media URL), and the workspace's bytes left today;
- the download streams and stops reading past the limit: a file that lies about its size is cut
  off there, never held whole;
- the kind and mime type are sniffed from the bytes (shared.media.sniff), and the sniffed kind's
  limit applies too (a "photo" that is a video is a video).

A refused file becomes a note to the user (`Fetched.notes`: "I couldn't open report.pdf: it is
100 MB, this workspace takes documents up to 20 MB."); a platform that fails or does not answer
in time becomes one too, and the turn goes on: a file never costs the user their message.
Every request ends by the deadline in scope (shared.deadline), its timeouts cut to the time left.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Final

from shared.channels.out.http import ChannelError, install_log_redaction, redact
from shared.clock import utcnow
from shared.deadline import current, cut, cut_by, out_of_time, passed
from shared.errors import DeadlineExceeded, MediaRefused
from shared.media.ids import media_id
from shared.models import Attachment, InboundMessage, MediaKind, MediaLimits, WorkspaceConfig
from shared.models.media import MediaItem
from shared.tls import tls_context

if TYPE_CHECKING:
    import httpx

    from shared.media.platforms import FileApi, Located
from shared.ports import MediaStore, MediaUsage, SecretStore

log = logging.getLogger("sigil.media")

# A file is bigger than a chat reply: a platform's CDN gets longer to send one, within the turn's
# deadline all the same.
TIMEOUT_S: Final = 30.0  # httpx (imported with the first file) takes them as its Timeout
CONNECT_TIMEOUT_S: Final = 5.0
CHUNK_BYTES: Final = 64 * 1024
_PLURAL: Final[Mapping[MediaKind, str]] = {
    "image": "images",
    "audio": "audio files",
    "document": "documents",
    "video": "videos",
    "other": "files of this type",
}
_LABEL: Final[Mapping[str, str]] = {
    "photo": "the photo",
    "image": "the photo",
    "voice": "the voice note",
    "audio": "the audio file",
    "video": "the video",
    "video_note": "the video note",
    "sticker": "the sticker",
    "animation": "the animation",
}


def human_size(size: int) -> str:
    """Decimal units, as the platforms state their own limits ("20 MB")."""
    if size >= 1_000_000:
        value = size / 1_000_000
        return f"{value:.0f} MB" if value >= 10 or value.is_integer() else f"{value:.1f} MB"
    if size >= 1000:
        return f"{size / 1000:.0f} KB"
    return f"{size} bytes"


def label(attachment: Attachment) -> str:
    return attachment.name or _LABEL.get(attachment.kind, "the file")


def _taken(limits: MediaLimits, kind: MediaKind) -> int:
    """The largest file of `kind` the workspace takes; 1 byte or less: none (the defaults for
    video and other)."""
    found = limits.kinds.get(kind)
    return found.max_bytes if found is not None else 0


def _check_size(limits: MediaLimits, kind: MediaKind, size: int | None) -> int:
    largest = _taken(limits, kind)
    if largest <= 1:
        raise MediaRefused(f"this workspace doesn't take {_PLURAL[kind]}")
    if size is not None and size > largest:
        raise MediaRefused(
            f"it is {human_size(size)}, this workspace takes {_PLURAL[kind]} up to {human_size(largest)}"
        )
    return largest


@dataclass
class Fetched:
    """What a turn's fetch stored (in the attachments' order) and what it tells the user."""

    items: list[MediaItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Job:
    """One turn's fetch: where it stores, whose it is, and what it may spend."""

    store: MediaStore
    usage: MediaUsage | None
    api: FileApi
    workspace: WorkspaceConfig
    inbound: InboundMessage
    user_id: str
    day: str


class MediaFetcher:
    """Fetches a turn's attachments. One per process: it keeps one HTTP connection pool."""

    def __init__(self, http: httpx.Client | None = None) -> None:
        self._http = http
        self._lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        # Built on the first attachment: a turn without files makes no client.
        with self._lock:
            if self._http is None:
                import httpx

                install_log_redaction()  # Telegram's file URLs carry the token: /file/bot<token>/
                timeout = httpx.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
                self._http = httpx.Client(timeout=timeout, follow_redirects=True, verify=tls_context())
            return self._http

    def fetch(
        self,
        *,
        store: MediaStore | None,
        usage: MediaUsage | None,
        secrets: SecretStore,
        workspace: WorkspaceConfig,
        inbound: InboundMessage,
        user_id: str,
        base_urls: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> Fetched:
        """Fetch `inbound`'s attachments, setting each stored one's `media_id`."""
        fetched = Fetched()
        if not inbound.attachments:
            return fetched
        # Here, with the first file: the platforms' file APIs and httpx are no plain turn's.
        from shared.media.platforms import LOCATORS, FileApi

        wanted = [a for a in inbound.attachments if a.media_id is not None or inbound.channel in LOCATORS]
        if not wanted:
            return fetched
        limits = workspace.media
        if store is None or not limits.enabled:
            names = ", ".join(label(a) for a in wanted)
            why = "files can't be kept here" if store is None else "this workspace doesn't take files"
            fetched.notes.append(f"I couldn't open {names}: {why}.")
            return fetched
        api = FileApi(self.http, secrets, dict(base_urls or {}), lambda: self._timeout(current()))
        job = _Job(store, usage, api, workspace, inbound, user_id, (now or utcnow()).date().isoformat())
        for index, attachment in enumerate(wanted):
            if attachment.media_id is not None:
                # Stored already (the chat page's upload): nothing to fetch.
                if (stored := store.get(workspace.id, attachment.media_id)) is not None:
                    fetched.items.append(stored)
                continue
            if index >= limits.max_files_per_message:
                fetched.notes.append(
                    f"I couldn't open {label(attachment)}: I open at most {limits.max_files_per_message} "
                    "files of one message."
                )
                continue
            try:
                item = self._one(job, attachment)
            except MediaRefused as exc:
                fetched.notes.append(f"I couldn't open {label(attachment)}: {exc.message}.")
                continue
            except (ChannelError, DeadlineExceeded) as exc:
                # The platform failed or was slow: said, and the message is answered all the same.
                log.warning(
                    "attachment not fetched",
                    extra={"workspace_id": workspace.id, "channel": inbound.channel, "error": exc.message},
                )
                fetched.notes.append(
                    f"I couldn't download {label(attachment)} just now; please send it again in a moment."
                )
                continue
            attachment.media_id = item.id
            fetched.items.append(item)
        return fetched

    def _one(self, job: _Job, attachment: Attachment) -> MediaItem:
        ws, channel, limits = job.workspace.id, job.inbound.channel, job.workspace.media
        source = attachment.id or attachment.url or ""
        if not source:
            raise MediaRefused("the platform sent no file id")
        item_id = media_id(ws, channel, source)
        if (stored := job.store.get(ws, item_id)) is not None:
            return stored  # a retried turn: stored by the first attempt
        # Here, not at import: filetype's matchers are for turns with files, not every cold start.
        from shared.media.sniff import declared_kind, sniff

        kind = declared_kind(attachment)
        largest = _check_size(limits, kind, attachment.size)
        left = limits.max_bytes_per_day - (job.usage.total(ws, job.day) if job.usage else 0)
        if left <= 0:
            raise MediaRefused(
                f"this workspace's {human_size(limits.max_bytes_per_day)} of files for today are used up"
            )
        from shared.media.platforms import LOCATORS

        located = LOCATORS[channel](job.api, job.inbound, attachment)
        _check_size(limits, kind, located.size)
        if located.size is not None and located.size > left:
            raise MediaRefused(
                f"it is {human_size(located.size)}, and this workspace has "
                f"{human_size(left)} of files left today"
            )
        data = self._download(located, min(largest, left), channel, kind)
        sniffed, mime = sniff(data, attachment.mime_type)
        if sniffed != kind:
            _check_size(limits, sniffed, len(data))
        item = MediaItem(
            id=item_id,
            workspace_id=ws,
            session_id=job.inbound.session_id,
            user_id=job.user_id,
            channel=channel,
            source_id=source,
            kind=sniffed,
            mime_type=mime,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            name=attachment.name,
        )
        job.store.put(item, data)
        if job.usage is not None:
            job.usage.add(ws, job.day, len(data))
        return item

    def _timeout(self, at: float | None) -> httpx.Timeout:
        import httpx

        own = self.http.timeout
        return httpx.Timeout(
            connect=cut(own.connect, at),
            read=cut(own.read, at),
            write=cut(own.write, at),
            pool=cut(own.pool, at),
        )

    def _download(self, located: Located, cap: int, platform: str, kind: MediaKind) -> bytes:
        """The bytes at `located`, read until `cap`: one byte more and the file is refused."""
        import httpx

        at = current()
        what = f"{platform} file download"
        if passed(at):
            raise out_of_time(what)
        too_large = MediaRefused(
            f"it is larger than the {human_size(cap)} this workspace takes for {_PLURAL[kind]}"
        )
        received = bytearray()
        try:
            with self.http.stream(
                "GET", located.url, headers=located.headers, timeout=self._timeout(at)
            ) as response:
                status = response.status_code
                if status == 429 or status >= 500:
                    raise ChannelError(
                        f"{what}: HTTP {status}", platform=platform, status=status, retryable=True
                    )
                if status != 200:
                    raise MediaRefused(f"{platform} answered HTTP {status} for it")
                length = response.headers.get("content-length", "")
                if length.isdigit() and int(length) > cap:
                    raise too_large
                if platform == "slack" and response.headers.get("content-type", "").startswith("text/html"):
                    # Slack's sign-in page instead of the file: the token lacks files:read.
                    raise MediaRefused(
                        "Slack answered with its sign-in page (the app needs the files:read scope)"
                    )
                for chunk in response.iter_bytes(CHUNK_BYTES):
                    received += chunk
                    if len(received) > cap:
                        raise too_large  # cut off: the connection closes here, the rest unread
                    if passed(at):
                        raise out_of_time(what)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.TimeoutException) and cut_by(at):
                raise out_of_time(what) from None
            detail = redact(f"{type(exc).__name__}: {exc}", located.secrets)
            # `from None`: the cause carries the request, and with it the token in the URL.
            raise ChannelError(f"{what}: {detail}", platform=platform, retryable=True) from None
        return bytes(received)
