"""The Orientation Document (specs 001/002, issue 31): what the context pipeline knows about the
person and the workspace, written into the system prompt at the start of a conversation.

Written when a conversation starts (a session that has none yet, or one just renewed with /new)
and again after ContextConfig.orientation_gap_s without a turn; in between it is kept on the
session (Session.orientation) and every turn sends it byte for byte as it was written, inside the
cached prefix after the static part (docs/context.md, "The Orientation Document", says why).

What it holds, each part in whole lines, deterministic (sorted, no clock but its own date), and
the whole within ContextConfig.orientation_tokens:
- the person: the Tier-3 facts about the sender that the turn's RecallScope reaches (the same
  reader as the prompt's facts, so never another person's private ones), most confident first;
- their recent topics: the newest Tier-2 summaries under that scope, a line each;
- the workspace: the skills the turn may load (a count and the first names) and, where the
  backend keeps tasks (Backend.tasks), how many are open (none: no line).

No model call: it costs the reads it makes (the facts' cached reader, one summaries query, one
tasks query), once a conversation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from shared.backend import Backend
from shared.errors import SigilError
from shared.models import ContextConfig, RecallScope, Session, Triple
from shared.skills import Skill

log = logging.getLogger("sigil.context")

HEADING: Final = "## Orientation"
MAX_FACTS: Final = 12
MAX_TOPICS: Final = 3
TOPIC_WORDS: Final = 25
SKILL_NAMES: Final = 10
# How far back the recent topics reach.
TOPICS_SINCE: Final = timedelta(days=30)


def needs_orientation(session: Session, config: ContextConfig, now: datetime) -> bool:
    """Whether this turn starts a conversation: no document yet, or none since a long gap."""
    if session.orientation_at is None:
        return True
    return (now - session.updated_at).total_seconds() > config.orientation_gap_s


def orientation_document(
    backend: Backend,
    workspace_id: str,
    *,
    person: str,
    scope: RecallScope,
    facts: Sequence[Triple],
    skills: Sequence[Skill],
    now: datetime,
    budget_tokens: int,
) -> str:
    """The document for a conversation with `person` (their display name) starting `now`."""
    at = now.astimezone(UTC)
    head = (
        f"{HEADING}\nWritten at the start of this conversation ({at.strftime('%Y-%m-%d %H:%M')} UTC), "
        "from memory: what is known about the person and this workspace. Newer facts may be below."
    )
    ranked = sorted(facts, key=lambda f: (-f.confidence, -f.updated_at.timestamp(), f.id))[:MAX_FACTS]
    about = [f"- {f.subject} {f.predicate} {f.object}" for f in ranked]
    topics = [f"- {line}" for line in _topics(backend, workspace_id, scope, at)]
    place = _workspace(backend, workspace_id, skills)
    sections = [
        (f"About {person or 'the person you are talking with'}:", about),
        ("Their recent topics:", topics),
        ("This workspace:", place),
    ]
    text = head
    for title, lines in sections:
        if not lines:
            continue
        block = f"\n{title}"
        for line in lines:
            if _estimate(text + block + "\n" + line) > budget_tokens:
                break
            block += "\n" + line
        if block != f"\n{title}":
            text += block
    return text if text != head else ""


def _topics(backend: Backend, workspace_id: str, scope: RecallScope, now: datetime) -> list[str]:
    """The newest summaries the scope reaches: their date and opening words."""
    try:
        found = backend.memory.list_summaries(workspace_id, scope=scope, start=now - TOPICS_SINCE, limit=50)
    except SigilError as exc:
        log.warning("orientation: summaries unreadable", extra={"error": type(exc).__name__})
        return []
    newest = sorted(found, key=lambda s: (s.end_at, s.id), reverse=True)[:MAX_TOPICS]
    lines = []
    for s in newest:
        words = s.text.split()
        opening = " ".join(words[:TOPIC_WORDS]) + (" …" if len(words) > TOPIC_WORDS else "")
        lines.append(f"{s.end_at.astimezone(UTC).strftime('%Y-%m-%d')}: {opening}")
    return lines


def _workspace(backend: Backend, workspace_id: str, skills: Sequence[Skill]) -> list[str]:
    lines = []
    if skills:
        names = sorted(s.name for s in skills)
        more = f" and {len(names) - SKILL_NAMES} more" if len(names) > SKILL_NAMES else ""
        count = f"{len(names)} skill" + ("s" if len(names) > 1 else "")
        lines.append(f"- {count} to load with `skill`: {', '.join(names[:SKILL_NAMES])}{more}")
    if backend.tasks is not None:
        try:
            open_tasks = backend.tasks.list_tasks(workspace_id, active=True, limit=100)
        except SigilError as exc:
            log.warning("orientation: tasks unreadable", extra={"error": type(exc).__name__})
        else:
            # None open is nothing to orient by: the line (and its tokens) only when some are.
            if open_tasks:
                count = f"{len(open_tasks)}+" if len(open_tasks) >= 100 else str(len(open_tasks))
                lines.append(f"- open delegated tasks: {count}")
    return lines


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)
