"""Metadata keys of index documents, and a message record's own document, shared by the writer,
search and the pointer expansion (so that neither of the last two imports the other)."""

from __future__ import annotations

from shared.models import IndexDoc, MemoryRecord

# Metadata key naming the record a chunk document belongs to (absent: the doc id is the record id).
RECORD_ID_KEY = "record_id"
# Metadata key of a message document's author: the name its writer goes by (MemoryRecord.author).
AUTHOR_KEY = "author"
MAX_AUTHOR_CHARS = 200


def message_doc(record: MemoryRecord) -> IndexDoc:
    """A Tier-1 record's document before context, facts and vector (MemoryWriter adds those)."""
    metadata = {"role": record.role, "seq": str(record.seq)}
    if record.user_id is not None:
        metadata["user_id"] = record.user_id
    if record.author and record.role == "user":
        metadata[AUTHOR_KEY] = record.author[:MAX_AUTHOR_CHARS]
    return IndexDoc(
        id=record.id,
        workspace_id=record.workspace_id,
        session_id=record.session_id,
        tier="message",
        text=record.text,
        created_at=record.created_at,
        metadata=metadata,
        scope=record.scope,
    )


def document_doc_id(media_id: str) -> str:
    """The index document of an attached file's extracted text (shared.media.content; its chunks
    follow MemoryWriter's ids): stable, so a retried turn rewrites it in place, and erasure finds
    it from the file's MediaItem."""
    return f"{media_id}.text"


def document_text(name: str, text: str) -> str:
    """What is indexed of a document: its name, then its (redacted) text."""
    return f"[document {name}]\n{text}"
