"""Metadata keys of index documents, shared by the writer, search and the pointer expansion (so
that neither of the last two imports the other)."""

from __future__ import annotations

# Metadata key naming the record a chunk document belongs to (absent: the doc id is the record id).
RECORD_ID_KEY = "record_id"
# Metadata key of a message document's author: the name its writer goes by (MemoryRecord.author).
AUTHOR_KEY = "author"
MAX_AUTHOR_CHARS = 200
