"""The chat page's uploads (docs/web-channel.md, "Attachments"; docs/media.md): a file is stored
first, and the `send` frame then names its media id.

One protocol for the page, two ways for the bytes, with the same browser token as the page's
socket (`Authorization: Bearer <token>`) and the same checks:

1. `POST /media/{workspace}/uploads` `{"session", "name", "size", "type"}`: a slot. The token must
   cover the session, the sender must be one the workspace admits (nothing is stored for a refused
   sender), and the declared size must fit the declared kind's limit and the day's total
   (MediaLimits, workspace.media); otherwise a MediaRefused (413) the page shows before it sends a
   byte. The answer says where the bytes go:
   - the local gateway (`sigil dev`): `{"url": "/media/{ws}/files?..."}`, a POST of the raw bytes
     to the gateway itself, which reads at most the limit, sniffs the type from the bytes, stores
     the file in the MediaStore and answers the file's record;
   - the cloud (the webhook function): `{"media_id", "url", "fields", "confirm"}`, a presigned S3
     POST to the media bucket (ports.MediaUploads: the size bounded by the policy, the key under
     the workspace's prefix, five minutes to use it), then `POST confirm`, which reads the object
     back, sniffs it, checks the limits again and records it in the MediaStore.
2. The answer of both: `{"media_id", "kind", "mime_type", "size", "name"}`.

The type is always sniffed from the bytes (shared.media.sniff, as for the platforms' files), never
taken from the name or the browser's declared type, which only picks the limit checked before the
upload.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from urllib.parse import urlencode

from pydantic import Field, ValidationError

from shared.channels import web, web_tokens
from shared.channels.inbound import WebhookRequest
from shared.channels.web_frames import SenderRefused, SessionForbidden
from shared.channels.web_tokens import BrowserClaims
from shared.clock import utcnow
from shared.errors import BadRequest, MediaRefused, NotFound
from shared.ingress import Ingress, check_id
from shared.ingress.admission import Admission
from shared.ingress.http import HttpAnswer
from shared.ingress.media import MediaNotYours, web_user_id
from shared.media.fetch import human_size
from shared.media.ids import media_id as derive_media_id
from shared.media.sniff import OCTET_STREAM, kind_of_mime, sniff
from shared.models import (
    Identifier,
    InboundMessage,
    MediaKind,
    MediaLimits,
    Model,
    Sender,
    WorkspaceConfig,
    new_workspace,
)
from shared.models.media import MediaItem
from shared.ports import IdentityStore, MediaStore, MediaUploads, MediaUsage, WorkspaceStore

# How long a presigned POST may be used: long enough for a slow phone's upload of the largest file.
UPLOAD_EXPIRY_S: Final = 300
MAX_NAME_CHARS: Final = 200


def declared_kind(content_type: str) -> MediaKind | None:
    """The kind a browser's declared type suggests, only to pick the limit checked before the
    upload; None when it says nothing (no type, or application/octet-stream)."""
    t = content_type.split(";", 1)[0].strip().lower()
    return None if t in ("", OCTET_STREAM) else kind_of_mime(t)


def check_size(limits: MediaLimits, kind: MediaKind | None, size: int, name: str) -> None:
    """MediaRefused unless the workspace takes `kind` files and `size` bytes fit its limit (kind
    None: the largest any kind may be)."""
    if not limits.enabled:
        raise MediaRefused("this workspace does not take files")
    if kind is None:
        if size > largest(limits):
            raise MediaRefused(f"{name} is too large: {human_size(size)}, more than this workspace takes")
        return
    kind_limits = limits.kinds.get(kind)
    # A limit of a byte or two is how a workspace says "not this kind" (video and other, by default).
    if kind_limits is None or kind_limits.max_bytes <= 1:
        raise MediaRefused(f"{name}: this workspace does not take {kind} files")
    if size > kind_limits.max_bytes:
        raise MediaRefused(
            f"{name} is too large: {human_size(size)}, and {_a(kind)} file may be at most "
            f"{human_size(kind_limits.max_bytes)}"
        )


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def largest(limits: MediaLimits) -> int:
    """The most bytes any file may have here: what a front reads of an upload before it refuses."""
    return max((k.max_bytes for k in limits.kinds.values()), default=0) if limits.enabled else 0


class SlotRequest(Model):
    """The body of POST /media/{workspace}/uploads."""

    session: Identifier
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    size: int = Field(ge=0, le=2**40)
    type: str = Field(default="", max_length=255)


def _bearer(request: WebhookRequest) -> str:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise web_tokens.TokenMalformed("an upload needs 'Authorization: Bearer <browser token>'")
    return token.strip()


def _clean_name(name: str) -> str:
    # Only a label (never a path): what a person sees on the chip; control characters dropped.
    kept = "".join(c for c in name if c.isprintable()).strip()
    return kept[:MAX_NAME_CHARS] or "file"


def item_json(item: MediaItem) -> dict[str, object]:
    return {
        "media_id": item.id,
        "kind": item.kind,
        "mime_type": item.mime_type,
        "size": item.size,
        "name": item.name,
    }


@dataclass
class Uploads:
    """The upload routes' logic, for the local gateway (staging None) and the webhook function."""

    ingress: Ingress  # the web secrets the browser tokens are checked with
    media: MediaStore | None
    workspaces: WorkspaceStore | None
    identities: IdentityStore | None
    admission: Admission | None
    # The day's bytes per workspace, which the platforms' fetches count too (None: no day total).
    usage: MediaUsage | None = None
    staging: MediaUploads | None = None  # the cloud's presigned POSTs; None: bytes to the front
    clock: Callable[[], float] = time.time
    now: Callable[[], datetime] = utcnow

    # ------------------------------------------------------------------ checks

    def _claims(self, workspace_id: str, request: WebhookRequest, session: str) -> BrowserClaims:
        check_id(workspace_id, "workspace")
        token = _bearer(request)
        # As a signed request: an unknown workspace answers as a bad signature does.
        secret = self.ingress._web_secret(workspace_id)
        claims = web_tokens.verify(secret, token, now=self.clock(), workspace=workspace_id)
        check_id(session, "session")
        if not claims.allows(session):
            raise SessionForbidden("this token does not cover that session")
        return claims

    def _workspace(self, workspace_id: str) -> WorkspaceConfig:
        found = self.workspaces.get(workspace_id) if self.workspaces is not None else None
        return found or new_workspace(workspace_id)

    def _limits(self, workspace_id: str) -> MediaLimits:
        return self._workspace(workspace_id).media

    def _store(self) -> MediaStore:
        if self.media is None:
            raise MediaRefused("files are not stored here (no media store is configured)")
        return self.media

    def _admit(self, claims: BrowserClaims, session: str) -> str:
        """The sender's Sigil user, once the workspace admits them: a refused sender (or one whose
        budget is spent) stores nothing."""
        if self.admission is not None:
            probe = InboundMessage(
                event_id="upload",
                channel="web",
                workspace_id=claims.workspace,
                session_id=web.session_id_for(session),
                sender=Sender(id=claims.user),
                chat_id=session,
                text="",
            )
            self.admission.check(probe)
        # Under pairing, a message from someone not yet approved gets the pairing code (the
        # admission lets it through for that); a file from them is kept for nobody.
        if self._workspace(claims.workspace).unknown_sender_policy == "pairing":
            known = self.identities.get(claims.workspace, "web", claims.user) if self.identities else None
            if known is None or known.status != "approved":
                raise SenderRefused("this workspace takes files only from people an admin has approved")
        return web_user_id(self.identities, claims.workspace, claims.user)

    def _day(self) -> str:
        return self.now().astimezone(UTC).date().isoformat()

    def _check_day(self, limits: MediaLimits, workspace_id: str, size: int) -> None:
        """The workspace's files today (MediaUsage, shared with the platforms' fetches) and these
        `size` bytes fit MediaLimits.max_bytes_per_day. Without a usage store, no day total."""
        used = self.usage.total(workspace_id, self._day()) if self.usage is not None else 0
        if used + size > limits.max_bytes_per_day:
            raise MediaRefused(
                f"this workspace's {human_size(limits.max_bytes_per_day)} of files for today are "
                f"used up ({human_size(used)} so far); more after midnight UTC"
            )

    # ------------------------------------------------------------------ routes

    def slot(self, workspace_id: str, request: WebhookRequest) -> HttpAnswer:
        """POST /media/{workspace}/uploads: where to send the file's bytes, once it may be sent."""
        try:
            want = SlotRequest.model_validate_json(request.body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise BadRequest(f"invalid upload: {where}: {first['msg']}") from None
        claims = self._claims(workspace_id, request, want.session)
        self._admit(claims, want.session)
        limits = self._limits(workspace_id)
        name = _clean_name(want.name)
        check_size(limits, declared_kind(want.type), want.size, name)
        self._check_day(limits, workspace_id, want.size)
        if self.staging is None:
            query = urlencode({"session": want.session, "name": name})
            return HttpAnswer(200, {"url": f"/media/{workspace_id}/files?{query}", "fields": None})
        media_id = derive_media_id(workspace_id, "web", "upload-" + secrets.token_hex(16))
        post = self.staging.presign(
            workspace_id,
            media_id,
            # The largest any kind may be: the confirm step checks the sniffed kind's own limit.
            max_bytes=largest(limits),
            metadata={"session": want.session, "user": claims.user},
            expires_s=UPLOAD_EXPIRY_S,
        )
        body = {
            "media_id": media_id,
            "url": post.url,
            "fields": post.fields,
            "confirm": f"/media/{workspace_id}/uploads/{media_id}?{urlencode({'name': name})}",
            "expires_in": UPLOAD_EXPIRY_S,
        }
        return HttpAnswer(200, body)

    def max_bytes(self, workspace_id: str, request: WebhookRequest) -> int:
        """What the local front reads of an upload's body at most (then refuses it as too large),
        once the token, the session and the sender pass: nobody else has any of it read."""
        session = request.query.get("session", "")
        self._admit(self._claims(workspace_id, request, session), session)
        return largest(self._limits(workspace_id))

    def receive(self, workspace_id: str, request: WebhookRequest) -> HttpAnswer:
        """POST /media/{workspace}/files?session=&name= (the local gateway): the bytes themselves,
        read by the front up to `max_bytes`; stored, and answered with the file's record."""
        session = request.query.get("session", "")
        claims = self._claims(workspace_id, request, session)
        user_id = self._admit(claims, session)
        source = "upload-" + secrets.token_hex(16)
        item = self._record(
            claims, session, user_id, source=source, name=request.query.get("name", ""), data=request.body
        )
        self._store().put(item, request.body)
        self._count(item)
        return HttpAnswer(200, item_json(item))

    def confirm(self, workspace_id: str, media_id: str, request: WebhookRequest) -> HttpAnswer:
        """POST /media/{workspace}/uploads/{id} (the cloud): the presigned POST's object, read back,
        sniffed, checked and recorded; the staged object is then removed."""
        if self.staging is None:
            raise NotFound("no such upload")
        check_id(workspace_id, "workspace")
        check_id(media_id, "media id")
        token_claims = web_tokens.verify(
            self.ingress._web_secret(workspace_id), _bearer(request), now=self.clock(), workspace=workspace_id
        )
        store = self._store()
        done = store.get(workspace_id, media_id)
        if done is not None:
            # Confirmed already (a retry after a lost answer): the same answer, to its owner only.
            if done.user_id != web_user_id(self.identities, workspace_id, token_claims.user):
                raise MediaNotYours("that upload is not yours")
            return HttpAnswer(200, item_json(done))
        staged = self.staging.staged(workspace_id, media_id)
        if staged is None or staged.metadata.get("user") != token_claims.user:
            raise MediaNotYours("no such upload of yours: post the file first, within five minutes")
        session = staged.metadata.get("session", "")
        claims = self._claims(workspace_id, request, session)
        user_id = self._admit(claims, session)
        limits = self._limits(workspace_id)
        if staged.size > largest(limits):
            self.staging.discard(workspace_id, media_id)
            raise MediaRefused("the file is larger than this workspace takes")
        data = self.staging.read_staged(workspace_id, media_id) or b""
        try:
            item = self._record(
                claims,
                session,
                user_id,
                source=media_id,
                name=request.query.get("name", ""),
                data=data,
                media_id=media_id,
            )
            store.put(item, data)
            self._count(item)
        finally:
            # Recorded or refused, the staged copy goes: nothing unrecorded is kept.
            self.staging.discard(workspace_id, media_id)
        return HttpAnswer(200, item_json(item))

    def _count(self, item: MediaItem) -> None:
        if self.usage is not None:
            self.usage.add(item.workspace_id, self._day(), item.size)

    def _record(
        self,
        claims: BrowserClaims,
        session: str,
        user_id: str,
        *,
        source: str,
        name: str,
        data: bytes,
        media_id: str | None = None,
    ) -> MediaItem:
        """The file's record once its sniffed kind, its size and the day's total allow it."""
        label = _clean_name(name)
        if not data:
            raise MediaRefused(f"{label} is empty")
        kind, mime = sniff(data)
        limits = self._limits(claims.workspace)
        check_size(limits, kind, len(data), label)
        self._check_day(limits, claims.workspace, len(data))
        return MediaItem(
            id=media_id or derive_media_id(claims.workspace, "web", source),
            workspace_id=claims.workspace,
            session_id=web.session_id_for(session),
            user_id=user_id,
            channel="web",
            source_id=source,
            kind=kind,
            mime_type=mime,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            name=label,
            created_at=self.now(),
        )
