"""The context pipeline (specs 001 and 002, issue 31): what a turn is shown before its first model
call, chosen deterministically and without a model call (0 tokens).

Per message, under the turn's RecallScope:
- memory: the hybrid search (BM25 + vectors, shared.memory.search.MemorySearch) over every tier
  the scope reaches, the message as the query, at most ContextConfig.max_items hits;
- skills: the workspace's catalogue matched against the message's words (a skill whose name or
  description shares words with it), the best three;
- the task pin: the session's active task, when there is one.

The workspace's ContextConfig.mode decides what the prompt gets (docs/context.md, "The context
pipeline"): nothing (`off`: the tools alone, spec 000); one line per memory with its id, for the
model to fetch with the memory tools (`pointers`); or the memories' text, ranked, whole items
within the budget (`inject`, spec 004's InjectMemory under its "Relevant Memory" heading). The
selection goes in the turn's context, after the cached static prefix (docs/context.md, "Prompt
caching"), and every pick with its score goes in the turn's audit record (never the text).

The pipeline never fails a turn: a search that fails is logged, and the turn goes on with what
the other sources found.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final

from shared.backend import Backend
from shared.errors import SigilError
from shared.memory.people import people_of
from shared.memory.search import MemoryHit, MemorySearch
from shared.models import ContextConfig, ContextMode, ContextPick, RecallScope
from shared.skills import Skill

log = logging.getLogger("sigil.context")

MEMORY_HEADING: Final = "## Relevant Memory"
POINTERS_HEADING: Final = (
    "## Relevant memory (pointers)\n"
    "Earlier messages and notes that may bear on this message. Search for the words shown with "
    "`memory_search` (or `memory_recall` for a person or topic) to read one in full."
)
SKILLS_LINE: Final = "Skills that may fit this message (load one with the `skill` tool):"
# The pointers mode's own budget: one short line an item.
POINTER_BUDGET: Final = 300
POINTER_WORDS: Final = 12
MAX_SKILLS: Final = 3
_WORD = re.compile(r"[a-z0-9]{3,}")
# Words too common to say a skill fits.
_STOP: Final = frozenset(
    {
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "you",
        "your",
        "are",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "how",
        "can",
        "will",
        "have",
        "has",
        "had",
        "not",
        "but",
        "from",
        "about",
        "into",
        "use",
        "using",
        "our",
        "all",
        "any",
    }
)


@dataclass(frozen=True)
class Selection:
    """What the pipeline chose for one turn, and the text it adds to the turn's context."""

    mode: ContextMode
    picks: list[ContextPick] = field(default_factory=list)
    text: str = ""
    elapsed_ms: float = 0.0
    search_mode: str | None = None  # how the memory search answered (hybrid, bm25, ...)
    # What was chosen, for the Refinement Gate to judge and `narrowed` to render again.
    hits: tuple[MemoryHit, ...] = ()
    skills: tuple[tuple[Skill, float], ...] = ()
    active_task: bool = False
    budget_tokens: int = 0

    @property
    def tokens(self) -> int:
        return _estimate(self.text)


def memory_searcher(backend: Backend) -> MemorySearch:
    """The hybrid search the pipeline and the memory tools share, over `backend`'s index."""
    return MemorySearch(backend.index, backend.memory, backend.embedder, people=people_of(backend.identities))


def select_context(
    searcher: MemorySearch,
    workspace_id: str,
    config: ContextConfig,
    message: str,
    *,
    scope: RecallScope,
    session_id: str,
    skills: Sequence[Skill] = (),
    active_task: str | None = None,
    now: datetime | None = None,
) -> Selection:
    """The selection for `message` under `config` (`off`: none, nothing searched)."""
    if config.mode == "off":
        return Selection(mode="off")
    started = time.perf_counter()
    hits, search_mode = _memory(
        searcher, workspace_id, config, message, scope=scope, session_id=session_id, now=now
    )
    selection = _rendered(
        config.mode,
        hits,
        match_skills(skills, message),
        active_task=bool(active_task and active_task.strip()),
        budget_tokens=config.budget_tokens,
    )
    return replace(
        selection, elapsed_ms=round((time.perf_counter() - started) * 1000, 3), search_mode=search_mode
    )


def narrowed(selection: Selection, keep: Collection[str]) -> Selection:
    """`selection` with only the memories and skills whose ids are in `keep` (the Refinement
    Gate's answer), rendered again in the same mode and budget; the task pin stays (it is shown
    with the time whatever the gate says)."""
    return replace(
        _rendered(
            selection.mode,
            [h for h in selection.hits if h.id in keep],
            [(s, score) for s, score in selection.skills if s.name in keep],
            active_task=selection.active_task,
            budget_tokens=selection.budget_tokens,
        ),
        elapsed_ms=selection.elapsed_ms,
        search_mode=selection.search_mode,
    )


def _rendered(
    mode: ContextMode,
    hits: Sequence[MemoryHit],
    fitting: Sequence[tuple[Skill, float]],
    *,
    active_task: bool,
    budget_tokens: int,
) -> Selection:
    text, shown = _inject(hits, budget_tokens) if mode == "inject" else _pointers(hits, POINTER_BUDGET)
    if fitting:
        text = "\n\n".join(t for t in (text, _skills_text(fitting)) if t)
    picks = [
        ContextPick(kind="memory", id=h.id, score=round(h.score, 4), tokens=shown.get(h.id, 0)) for h in hits
    ]
    picks += [ContextPick(kind="skill", id=s.name, score=round(score, 4)) for s, score in fitting]
    if active_task:
        picks.append(ContextPick(kind="task", id="active_task", score=1.0))
    return Selection(
        mode=mode,
        picks=picks,
        text=text,
        hits=tuple(hits),
        skills=tuple(fitting),
        active_task=active_task,
        budget_tokens=budget_tokens,
    )


def _memory(
    search: MemorySearch,
    workspace_id: str,
    config: ContextConfig,
    message: str,
    *,
    scope: RecallScope,
    session_id: str,
    now: datetime | None,
) -> tuple[list[MemoryHit], str | None]:
    if not message.strip():
        return [], None
    try:
        outcome = search.search(
            workspace_id, message[:2000], scope=scope, k=config.max_items, now=now, recent_from=session_id
        )
    except SigilError as exc:
        # The search's own degradation (no embedder, a failed index) is inside it; what reaches
        # here is a store that failed outright: the turn goes on without memory.
        log.warning("context pipeline: memory search failed", extra={"error": type(exc).__name__})
        return [], None
    if outcome.mode == "recent":
        return [], outcome.mode  # the window already holds the session's newest messages
    return list(outcome.hits), outcome.mode


def match_skills(skills: Sequence[Skill], message: str) -> list[tuple[Skill, float]]:
    """The skills whose name or description shares words with the message, best first: the
    shared words' count over the square root of the skill's words (a long description does not
    win by length), ties by name."""
    words = _words(message)
    if not words:
        return []
    scored = []
    for s in skills:
        own = _words(f"{s.name.replace('-', ' ')} {s.description}")
        shared = len(words & own)
        if shared:
            scored.append((s, shared / math.sqrt(len(own))))
    scored.sort(key=lambda pair: (-pair[1], pair[0].name))
    return scored[:MAX_SKILLS]


def _words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def _stem(word: str) -> str:
    """The word without a plural or -ing/-ed ending ("bookings", "booked": "book"): crude, and
    enough to match a message against a one-line description."""
    for suffix in ("ings", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d")


def _inject(hits: Sequence[MemoryHit], budget: int) -> tuple[str, dict[str, int]]:
    """Whole items, best first, while they fit the budget."""
    text, shown = MEMORY_HEADING, {}
    for h in hits:
        line = f"\n- [{h.tier} · {_when(h.created_at)}] {' '.join(h.text.split())}"
        if _estimate(text + line) > budget:
            continue  # a shorter one further down may still fit
        text += line
        shown[h.id] = _estimate(line)
    return (text, shown) if shown else ("", {})


def _pointers(hits: Sequence[MemoryHit], budget: int) -> tuple[str, dict[str, int]]:
    text, shown = POINTERS_HEADING, {}
    for h in hits:
        words = h.text.split()
        opening = " ".join(words[:POINTER_WORDS]) + (" …" if len(words) > POINTER_WORDS else "")
        line = f"\n- {h.id} [{h.tier} · {_when(h.created_at)}] {opening}"
        if _estimate(text + line) > budget:
            break
        text += line
        shown[h.id] = _estimate(line)
    return (text, shown) if shown else ("", {})


def _skills_text(fitting: Sequence[tuple[Skill, float]]) -> str:
    return SKILLS_LINE + "".join(f"\n- {s.name}" for s, _ in fitting)


def shown_part(context: str) -> str:
    """The pipeline's part of a turn's context (the text after the cached prefix), as the prompt
    shows it: from its first heading to the time line that follows it (shared.agent.context puts
    the selection right before "now"); "" when it shows nothing. Its items are one line each
    (whitespace folded), so no blank line inside it ends it early."""
    starts = [i for i in (context.find(h) for h in (MEMORY_HEADING, POINTERS_HEADING, SKILLS_LINE)) if i >= 0]
    if not starts:
        return ""
    start = min(starts)
    end = context.find("\n\nNow: ", start)
    return context[start : end if end >= 0 else len(context)].strip()


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)
