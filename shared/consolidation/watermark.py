"""The per-turn extraction's watermark (spec 003's flush guard): the seqs of a session's messages
already extracted per turn (shared.consolidation.turn_extraction), which compaction's extraction
skips (shared.consolidation.compaction). One range, "first:last", kept as a consolidation-state
checkpoint beside compaction's own, so a turn's commit never races it for the session's version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared.backend import Backend
from shared.models import MemoryRecord

log = logging.getLogger("sigil.consolidation.turn")


def watermark_name(session_id: str) -> str:
    return f"extracted:{session_id}"


def extracted_range(backend: Backend, workspace_id: str, session_id: str) -> tuple[int, int] | None:
    """The seqs (first, last) the per-turn extraction covered last; None when it covered none."""
    value = backend.consolidation.get_checkpoint(workspace_id, watermark_name(session_id))
    if not value:
        return None
    first, _, last = value.partition(":")
    try:
        return int(first), int(last)
    except ValueError:
        log.warning("unreadable extraction watermark", extra={"session_id": session_id})
        return None


def not_extracted(backend: Backend, workspace_id: str, session_id: str) -> Callable[[MemoryRecord], bool]:
    """For compaction's flush guard: whether a record still needs extracting."""
    covered = extracted_range(backend, workspace_id, session_id)
    if covered is None:
        return lambda _: True
    first, last = covered
    return lambda r: not first <= r.seq <= last
