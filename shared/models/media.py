"""Media a sender attached (docs/media.md): what the MediaStore keeps of each fetched file."""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

from datetime import datetime

from pydantic import Field

from shared.clock import utcnow
from shared.models import Identifier, MediaKind, Model, WorkspaceId


class MediaItem(Model):
    # Derived from the platform's own file id (shared.media), so fetching again is idempotent.
    id: Identifier
    workspace_id: WorkspaceId
    session_id: Identifier
    user_id: str  # the sender's Sigil user: erasure finds their files by it
    channel: str
    source_id: str  # the platform's file id (Telegram file_id, Slack file id, ...)
    kind: MediaKind
    mime_type: str  # sniffed from the bytes, never taken from the name
    size: int = Field(ge=0)
    sha256: str
    name: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    # A voice note's transcript or a document's extracted text (redacted), once made.
    text: str | None = None
    text_source: str | None = None  # "transcript" | "extracted"


class Transcript(Model):
    """What a transcription provider made of a voice note (shared.ports.Transcriber)."""

    text: str
    # The audio's length as the provider billed it; None when it reports tokens instead (then the
    # cost is estimated from the file's size: shared.media.content).
    seconds: float | None = Field(default=None, ge=0)
    model: str
