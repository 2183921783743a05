"""Files on a browser's message (docs/web-channel.md, "Attachments"): each media id the `send`
frame names is checked against the media store before the message is queued, the same locally
(shared.ingress.browser) and in the cloud (shared.ingress.ws).

A page uploads a file first (shared.media.upload) and then names its media id in the frame. The id
is only good in the conversation it was uploaded to and for the person who uploaded it: an id from
another workspace (each workspace's store is its own), another person or another session is
refused as one that does not exist, so a probe learns nothing about other people's files.
"""

from __future__ import annotations

from shared.errors import MediaRefused
from shared.identity import derived_user_id
from shared.models import Attachment, InboundMessage, MediaLimits
from shared.ports import IdentityStore, MediaStore


class MediaNotYours(MediaRefused):
    """A media id that is not this sender's upload to this conversation (or names no file)."""

    code = "media_forbidden"
    http_status = 403


def web_user_id(identities: IdentityStore | None, workspace_id: str, sender: str) -> str:
    """The Sigil user a web sender is, as the turn resolves them (shared.identity): the identity an
    admin linked or approved, else the web user id itself. A stored file is filed under it, so
    erasing the user erases the file."""
    found = identities.get(workspace_id, "web", sender) if identities is not None else None
    return found.user_id if found is not None else derived_user_id("web", sender)


def attach(
    inbound: InboundMessage,
    media: MediaStore | None,
    limits: MediaLimits,
    identities: IdentityStore | None,
) -> InboundMessage:
    """`inbound` with its attachments filled in from the store; MediaRefused when it names more
    files than the workspace takes on one message, when the workspace takes none, or (as
    MediaNotYours) when one is not the sender's upload to this session."""
    if not inbound.attachments:
        return inbound
    if media is None or not limits.enabled:
        raise MediaRefused("this workspace does not take files")
    ids = list(dict.fromkeys(a.media_id for a in inbound.attachments if a.media_id))
    if len(ids) > limits.max_files_per_message:
        raise MediaRefused(f"at most {limits.max_files_per_message} files on one message")
    user_id = web_user_id(identities, inbound.workspace_id, inbound.sender.id)
    found: list[Attachment] = []
    for media_id in ids:
        item = media.get(inbound.workspace_id, media_id)
        if (
            item is None
            or item.channel != "web"
            or item.session_id != inbound.session_id
            or item.user_id != user_id
        ):
            raise MediaNotYours(f"file {media_id} is not one you uploaded to this conversation")
        found.append(
            Attachment(
                kind=item.kind,
                id=item.source_id,
                name=item.name,
                mime_type=item.mime_type,
                size=item.size,
                media_id=item.id,
            )
        )
    return inbound.model_copy(update={"attachments": found})
