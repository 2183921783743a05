"""What the model reads of a message's media (docs/media.md): `media_inputs`, called once by the
turn (shared.agent.turn) after the files are fetched into the MediaStore.

Per attachment with a media id (Attachment.media_id), by the stored item's kind:

- image: the photo goes to the model as an image (UserMessage.images holds its id, size and type;
  ChatRequest.images its bytes, for this request only, never stored), in each provider's format
  (shared.providers). A model that cannot see images (shared.providers.capabilities) gets
  PHOTO_NOT_SEEN in the message's text instead, never an error. The photo's prompt tokens are
  estimated by its provider's formula for the audit (AuditRecord.image_tokens); the provider's
  usage report, which counts them, is what the budget is charged after the call.
- audio: the voice note is transcribed (the Transcriber port), once: the transcript is redacted
  and stored on the MediaItem (text_source "transcript"), so a retried turn reads it back instead
  of paying again. It becomes the message's text, marked "[voice note, transcribed] ...", in the
  window and so in memory when the message rolls out. Its cost (per minute) is charged to the
  turn's budget before the model call; a spent budget or no transcriber gives a note instead.
- document: its text is extracted (shared.media.extract, bounded by the workspace's max_pages
  and max_chars, with a note when cut), redacted before anything stores it, indexed in memory
  under the sender's scope (so memory_search finds it on a later turn), and stored on the item.
  This request shows it quoted as untrusted data (shared.safety.guard, like a tool result); the
  stored message keeps one line naming the document, not its text.
- video and anything else: a note that it is not read.

Nothing here raises for a bad file: a file that cannot be read is a note the model sees.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Protocol

from shared.budgets import TurnBudget
from shared.errors import ProviderError
from shared.media.images import MODEL_IMAGE_TYPES, image_size
from shared.memory.doc_keys import document_doc_id, document_text
from shared.memory.writer import MemoryWriter
from shared.models import Attachment, ImageRef, IndexDoc, MemoryScope, UserMessage, WorkspaceConfig
from shared.models.media import MediaItem
from shared.ports import MediaStore, Transcriber
from shared.providers.base import ImageData
from shared.safety.redact import redact

log = logging.getLogger(__name__)

PHOTO_NOT_SEEN: Final = "[The user sent a photo; this model cannot see images.]"
VOICE_PREFIX: Final = "[voice note, transcribed]"
# A voice note's size per second when the provider does not report the duration: 32 kbit/s, the
# top of what Telegram's and WhatsApp's Opus voice notes use, so the estimate errs high.
AUDIO_BYTES_PER_S: Final = 4000
DOCUMENT_SOURCE: Final = "document"


class Guard(Protocol):
    """shared.agent.loop.Safety.guard: scan, redact, and quote untrusted text (and count it)."""

    def __call__(self, text: str, *, source: str, quote_all: bool = False) -> str: ...


@dataclass(frozen=True)
class MediaDeps:
    store: MediaStore | None
    transcriber: Transcriber | None = None
    writer: MemoryWriter | None = None  # where a document's text is indexed; None: not indexed
    capability_overrides: Mapping[str, list[str]] = field(default_factory=dict)
    transcription_usd_per_min: Decimal | None = None


@dataclass
class MediaInputs:
    user: UserMessage  # the message as the session keeps it
    shown: UserMessage  # the message as this request sends it (documents' text added)
    images: dict[str, ImageData] = field(default_factory=dict)  # ChatRequest.images
    image_tokens: int = 0
    audio_seconds: float = 0.0


def stored_items(
    store: MediaStore | None, workspace_id: str, attachments: Sequence[Attachment]
) -> list[MediaItem]:
    """The stored files the attachments name (Attachment.media_id), in order, each once: for a
    turn that did not fetch them itself (a redrive of a kept message)."""
    if store is None:
        return []
    ids = dict.fromkeys(a.media_id for a in attachments if a.media_id)
    return [item for media_id in ids if (item := store.get(workspace_id, media_id)) is not None]


def media_inputs(
    deps: MediaDeps,
    workspace: WorkspaceConfig,
    items: Sequence[MediaItem],
    user: UserMessage,
    *,
    model_ref: str,
    user_id: str,
    scope: MemoryScope,
    guard: Guard,
    budget: TurnBudget | None = None,
    kept: bool = False,
) -> MediaInputs:
    """The message `user` with its stored files `items`, for the session and for this request.
    `kept`: `user` is a stored message (a redrive) that already has its media's lines: only the
    request's parts (images, documents' text) are added."""
    out = MediaInputs(user=user, shown=user)
    if not items or deps.store is None:
        return out
    lines: list[str] = []  # added to the stored message
    shown: list[str] = []  # added to this request's message only
    refs: list[ImageRef] = []
    for item in items:
        if item.kind == "image":
            lines += _image(deps, item, model_ref, refs, out)
        elif item.kind == "audio":
            lines.append(_voice(deps, item, guard, budget, out, pii=workspace.pii_redaction))
        elif item.kind == "document":
            line, text = _document(deps, workspace, item, user_id=user_id, scope=scope, guard=guard)
            lines.append(line)
            if text:
                shown.append(text)
        else:
            lines.append(f"[The user sent {_what(item)}; files of this kind are not read.]")
    if kept:
        stored = user if user.images else user.model_copy(update={"images": refs})
    else:
        content = "\n\n".join(part for part in [*lines, user.content] if part)
        stored = user.model_copy(update={"content": content, "images": refs})
    out.user = stored
    if shown:
        out.shown = stored.model_copy(update={"content": "\n\n".join([stored.content, *shown])})
    else:
        out.shown = stored
    return out


def _what(item: MediaItem) -> str:
    kind = {"video": "a video", "image": "a photo", "audio": "a voice note"}.get(item.kind, "a file")
    return f"{kind} ({item.name})" if item.name else kind


def _image(
    deps: MediaDeps, item: MediaItem, model_ref: str, refs: list[ImageRef], out: MediaInputs
) -> list[str]:
    from shared.providers.capabilities import capabilities, image_tokens  # a photo's turn only

    if not capabilities(model_ref, deps.capability_overrides).image:
        return [PHOTO_NOT_SEEN]
    if item.mime_type not in MODEL_IMAGE_TYPES:
        return [f"[The user sent an image as {item.mime_type}, a format the model cannot take.]"]
    data = deps.store.read(item.workspace_id, item.id) if deps.store is not None else None
    if data is None:
        return ["[The user sent a photo that is no longer available.]"]
    size = image_size(data)
    width, height = size if size else (None, None)
    refs.append(
        ImageRef(media_id=item.id, mime_type=item.mime_type, width=width, height=height, name=item.name)
    )
    out.images[item.id] = ImageData(mime_type=item.mime_type, data=data)
    out.image_tokens += image_tokens(model_ref, width, height)
    return []


def _voice(
    deps: MediaDeps, item: MediaItem, guard: Guard, budget: TurnBudget | None, out: MediaInputs, *, pii: bool
) -> str:
    text = item.text if item.text_source == "transcript" else None
    if text is None:
        text = _transcribe(deps, item, budget, out, pii=pii)
        if text is None:
            return f"[The user sent {_what(item)}; it could not be transcribed.]"
    # The same scan as the user's own words: a transcript is what they said.
    return f"{VOICE_PREFIX} {guard(text, source='the user')}"


def _transcribe(
    deps: MediaDeps, item: MediaItem, budget: TurnBudget | None, out: MediaInputs, *, pii: bool
) -> str | None:
    from shared.providers.transcription import usd_per_min

    store, transcriber = deps.store, deps.transcriber
    if transcriber is None or store is None:
        return None
    if budget is not None and budget.check().exhausted is not None:
        return None  # the budget is spent: no paid call, and the turn's own check says why
    audio = store.read(item.workspace_id, item.id)
    if audio is None:
        return None
    try:
        transcript = transcriber.transcribe(audio, mime_type=item.mime_type, filename=_audio_filename(item))
    except ProviderError as exc:
        # The turn goes on: the model tells the user it could not hear the note.
        log.warning("transcription failed", extra={"media_id": item.id, "error": exc.message})
        return None
    seconds = transcript.seconds if transcript.seconds is not None else item.size / AUDIO_BYTES_PER_S
    out.audio_seconds += seconds
    if budget is not None:
        rate = deps.transcription_usd_per_min
        budget.charge_usd(
            (rate if rate is not None else usd_per_min(transcriber.model_ref)) * Decimal(seconds) / 60
        )
    # Redacted before it is stored: the record keeps what the session and memory may keep.
    text = redact(transcript.text, pii=pii).text
    store.update(item.model_copy(update={"text": text, "text_source": "transcript"}))
    return text


# OpenAI's endpoint tells the audio's format by the file name's extension (flac, m4a, mp3, mp4,
# mpeg, mpga, oga, ogg, wav, webm), so a note without a name, or a name without an extension,
# is named by its sniffed type.
_AUDIO_EXTENSIONS: Final = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
}


def _audio_filename(item: MediaItem) -> str:
    extension = _AUDIO_EXTENSIONS.get(item.mime_type, "ogg")
    name = item.name or "voice"
    return name if name.lower().endswith(f".{extension}") else f"{name}.{extension}"


def _document(
    deps: MediaDeps,
    workspace: WorkspaceConfig,
    item: MediaItem,
    *,
    user_id: str,
    scope: MemoryScope,
    guard: Guard,
) -> tuple[str, str]:
    """(the stored message's line, the request's quoted text)."""
    name = item.name or "a document"
    note = None
    text = item.text if item.text_source == "extracted" else None
    if text is None:
        data = deps.store.read(item.workspace_id, item.id) if deps.store is not None else None
        if data is None:
            return f"[The user sent a document ({name}) that is no longer available.]", ""
        limits = workspace.media
        from shared.media.extract import extract_text  # a document's turn only

        extracted = extract_text(data, item.mime_type, max_pages=limits.max_pages, max_chars=limits.max_chars)
        note = extracted.note
        # Redacted before anything stores it (secrets always, PII per the workspace).
        text = redact(extracted.text, pii=workspace.pii_redaction).text
        if text and deps.writer is not None:
            deps.writer.write_docs(workspace.id, [_index_doc(item, name, text, user_id, scope)])
        if deps.store is not None and text:
            deps.store.update(item.model_copy(update={"text": text, "text_source": "extracted"}))
    if not text:
        return f"[The user sent a document ({name}) with no text that could be read{_noted(note)}.]", ""
    line = f"[The user sent a document ({name}); its text follows, and is kept in memory{_noted(note)}.]"
    quoted = guard(f"{name}:\n{text}", source=f"{DOCUMENT_SOURCE} {name}", quote_all=True)
    return line, quoted


def _noted(note: str | None) -> str:
    return f": {note}" if note else ""


def _index_doc(item: MediaItem, name: str, text: str, user_id: str, scope: MemoryScope) -> IndexDoc:
    return IndexDoc(
        id=document_doc_id(item.id),
        workspace_id=item.workspace_id,
        session_id=item.session_id,
        # A message-tier document, so memory_search (messages) finds it beside what was said.
        tier="message",
        text=document_text(name, text),
        created_at=item.created_at,
        metadata={"role": "user", "user_id": user_id, "media_id": item.id, "kind": DOCUMENT_SOURCE},
        scope=scope,
    )
