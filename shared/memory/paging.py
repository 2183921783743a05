"""Whole reads through the MemoryStore's pages: every message of a session, every fact of a
workspace. For the paths that must see all of them (erasure, replay's sandbox), not for a turn."""

from __future__ import annotations

from typing import Final

from shared.models import WORKSPACE_WIDE, MemoryRecord, Triple
from shared.ports import MemoryStore

PAGE: Final = 1_000


def all_messages(memory: MemoryStore, workspace_id: str, session_id: str) -> list[MemoryRecord]:
    """The session's Tier-1 records, oldest first."""
    found: list[MemoryRecord] = []
    after = -1
    while page := memory.get_messages(workspace_id, session_id, after_seq=after, limit=PAGE):
        found += page
        after = page[-1].seq
        if len(page) < PAGE:
            break
    return found


def all_triples(memory: MemoryStore, workspace_id: str) -> list[Triple]:
    """Every fact of the workspace, whoever owns it and whatever its status."""
    found: list[Triple] = []
    after: str | None = None
    while page := memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=PAGE):
        found += page
        after = page[-1].id
    return found
