"""A stored file's id: derived from its workspace, platform and the platform's own file id.

So a retried turn finds the file it stored the first time instead of downloading it again, and
the same platform file id sent in two workspaces gives two ids (one workspace never reads
another's file, even when a file id leaks between them).
"""

from __future__ import annotations

import hashlib
import re

from shared.errors import BadRequest
from shared.models import ID_PATTERN

MEDIA_ID_PREFIX = "m-"
_ID = re.compile(ID_PATTERN)


def media_id(workspace_id: str, channel: str, source_id: str) -> str:
    digest = hashlib.sha256(f"{workspace_id}\x00{channel}\x00{source_id}".encode()).hexdigest()
    return MEDIA_ID_PREFIX + digest[:24]


def check_media_id(value: str) -> str:
    """`value` if it can name a file or key (no separator, never `.` or `..`), else BadRequest."""
    if not _ID.match(value):
        raise BadRequest(f"media id {value!r} is not valid")
    return value
