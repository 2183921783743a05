"""The system prompt of a turn (spec 000 step 2, spec 003): its parts, their order and budgets.

The prompt comes in two parts (docs/context.md, "Prompt caching"): a static prefix, byte-identical
on every turn of a session, which the providers cache, and the turn's context after it, which
changes. Each part is trimmed to its own token budget and left out when empty.

Static prefix (AssembledContext.static):

1. personality   the workspace's system_prompt
2. catalogue     one line per skill the turn may load with the `skill` tool, in name order: its
                 name and the start of its description (progressive disclosure, docs/skills.md);
                 `manual` skills are not listed (a keyword skill loaded below still is: the
                 catalogue must not change from one message to the next)
3. tools         each tool's name and the first line of its description, in name order; the JSON
                 schemas go to the provider separately (ChatRequest.tools)
4. channel       what the channel renders and its message size
5. safety        SYSTEM_PROMPT_NOTE, never trimmed: it tells the model what a quoted block is,
                 before any of the context or the messages that may hold one

Orientation (AssembledContext.orientation): the conversation's Orientation Document
(shared.agent.orientation), when the pipeline is on: written at the conversation's start and kept
on the session, so it is the same on every turn of the conversation and goes in the cached prefix,
after the static part (docs/context.md, "The Orientation Document").

Turn context (AssembledContext.dynamic):

6. learned       "## Personality (Learned)": the directive synthesised from the sender's style
                 observations (spec 003; shared.memory.personality), when there is one
7. skills        the SKILL.md bodies this message loads directly (shared.skills.select_skills:
                 "use skill: NAME" and keyword triggers)
8. facts         Tier-3 facts as "subject predicate object" lines, most confident first, whole
                 lines only, up to the budget (spec 004's injection)
8b. selection    the context pipeline's choice for this message (shared.agent.pipeline): memory
                 pointers or text, and the skills that may fit; empty with the pipeline off
9. now           the date and time (UTC, ISO 8601, weekday) and the active-task pin, if any
10. summary      the session's rolling summary of the messages that left the window
11. nudge        the memory nudge, for this turn only (shared.agent.nudge), when it fires

The active window and the new message follow as the request's messages. Tokens are estimated as
characters / 4 (rounded up): no tokenizer on the turn path, and close enough for English text
for a budget whose job is to stop one part (a long skill, a long summary) crowding out the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from shared.models import Triple, WorkspaceConfig
from shared.providers.base import ToolSpec
from shared.safety.injection import SYSTEM_PROMPT_NOTE
from shared.skills import Skill

# Token budgets per part; the note is fixed text and never trimmed.
BUDGETS: Final[dict[str, int]] = {
    "personality": 1000,
    "catalogue": 2000,
    "skills": 1500,
    "tools": 500,
    "facts": 300,
    "channel": 100,
    "now": 100,
    "summary": 800,
    "learned": 300,
    "nudge": 100,
    # The context pipeline's selection (shared.agent.pipeline) keeps to its workspace's own budget
    # (ContextConfig.budget_tokens, at most this); this only bounds it.
    "selection": 8000,
}
ELLIPSIS = " …"
LEARNED_HEADING: Final = "## Personality (Learned)"
# A catalogue line carries at most this much of a description (agentskills.io allows 1,024
# characters): enough to choose by, and 50 skills fit the catalogue's budget (bench/skills_prompt.py).
CATALOGUE_DESCRIPTION_CHARS = 150

CHANNEL_HINTS: Final[dict[str, str]] = {
    # The gateway renders the model's Markdown into each platform's dialect (shared.channels.format)
    # and splits long replies, so the hints say what survives the rendering and what fits.
    "web": "Channel: web chat. Markdown renders fully (headings, lists, tables, code blocks, links).",
    "telegram": (
        "Channel: Telegram. Write Markdown; it is sent in Telegram's HTML subset (bold, italic, strike, "
        "code, code blocks, links, quotes). Tables and headings don't render. A message holds 4096 "
        "characters; longer replies are split."
    ),
    "slack": (
        "Channel: Slack. Write Markdown; it is sent as Slack mrkdwn (bold, italic, strike, code, "
        "code blocks, links). Tables and headings don't render. Keep replies short."
    ),
    "discord": (
        "Channel: Discord. Markdown renders (no tables). A message holds 2000 characters; longer "
        "replies are split, so prefer short answers."
    ),
    "whatsapp": (
        "Channel: WhatsApp. Mostly plain text: bold, italic, strike and monospace only; no headings, "
        "tables or link markup. Keep replies short, as on a phone."
    ),
}


# The parts of the static prefix; every other part is the turn's context, after it.
STATIC_PARTS: Final = frozenset({"personality", "catalogue", "tools", "channel", "safety"})


@dataclass(frozen=True)
class AssembledContext:
    # The prefix the providers cache (ChatRequest.cache_prefix is its length): the workspace's
    # static part, then the conversation's Orientation Document when it has one.
    static: str
    dynamic: str  # what changes from turn to turn
    parts: list[tuple[str, int]]  # (part name, estimated tokens), in prompt order
    # The Orientation Document (shared.agent.orientation), the end of `static`: the same on every
    # turn of the conversation, so inside the cached prefix.
    orientation: str = ""

    @property
    def text(self) -> str:
        """The whole system prompt, as a provider with one system slot sends it."""
        return "\n\n".join(part for part in (self.static, self.dynamic) if part)

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.parts)


def estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def trim(text: str, budget: int) -> str:
    """`text` cut to `budget` tokens at a word boundary, with an ellipsis when cut."""
    if estimate(text) <= budget:
        return text
    room = max(0, budget * 4 - len(ELLIPSIS))
    cut = text[:room]
    if " " in cut[room // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + ELLIPSIS


MAX_TOKENS: Final[int] = sum(BUDGETS.values()) + estimate(SYSTEM_PROMPT_NOTE)


def assemble_system_prompt(
    workspace: WorkspaceConfig,
    *,
    skills: Sequence[Skill] = (),
    catalogue: Sequence[Skill] = (),
    tools: Sequence[ToolSpec] = (),
    facts: Sequence[Triple] = (),
    channel: str = "web",
    now: datetime,
    active_task: str | None = None,
    summary: str = "",
    learned: str = "",
    nudge: str = "",
    selection: str = "",
    orientation: str = "",
) -> AssembledContext:
    """The system prompt in the documented order; `skills` are those already selected, and
    `catalogue` those the model may load (listed whether or not they are in `skills`, so that the
    static prefix stays the same from one message to the next)."""
    static_sections = [
        ("personality", workspace.system_prompt.strip()),
        ("catalogue", _catalogue(sorted(catalogue, key=lambda s: s.name), BUDGETS["catalogue"])),
        ("tools", _tools(sorted(tools, key=lambda t: t.name))),
        ("channel", CHANNEL_HINTS.get(channel, "")),
    ]
    dynamic_sections = [
        ("learned", f"{LEARNED_HEADING}\n{learned.strip()}" if learned.strip() else ""),
        ("skills", _skills(skills)),
        ("facts", _facts(facts, BUDGETS["facts"])),
        ("selection", selection.strip()),
        ("now", _now(now, active_task)),
        ("summary", f"## Conversation so far (summary)\n{summary.strip()}" if summary.strip() else ""),
        ("nudge", nudge.strip()),
    ]
    static, parts = _kept(static_sections)
    static.append(SYSTEM_PROMPT_NOTE)
    parts.append(("safety", estimate(SYSTEM_PROMPT_NOTE)))
    dynamic, dynamic_parts = _kept(dynamic_sections)
    # Already bounded when it was written (ContextConfig.orientation_tokens), and never trimmed
    # here: a cut made now could differ from the last turn's, and break the cached prefix.
    oriented = orientation.strip()
    orientation_parts = [("orientation", estimate(oriented))] if oriented else []
    if oriented:
        static.append(oriented)
    return AssembledContext(
        static="\n\n".join(static),
        dynamic="\n\n".join(dynamic),
        parts=parts + orientation_parts + dynamic_parts,
        orientation=oriented,
    )


def _kept(sections: Sequence[tuple[str, str]]) -> tuple[list[str], list[tuple[str, int]]]:
    """Each non-empty section trimmed to its budget, and its estimated tokens."""
    texts, parts = [], []
    for name, text in sections:
        if text:
            kept = trim(text, BUDGETS[name])
            texts.append(kept)
            parts.append((name, estimate(kept)))
    return texts, parts


def _skills(skills: Sequence[Skill]) -> str:
    if not skills:
        return ""
    blocks = [f"### Skill: {s.name}\n{s.description}\n\n{s.body}".rstrip() for s in skills]
    return "## Skills\n" + "\n\n".join(blocks)


def _catalogue(skills: Sequence[Skill], budget: int) -> str:
    """Whole lines while they fit; past the budget, a count and how to get the rest."""
    if not skills:
        return ""
    text = (
        "## Skills you can load\n"
        "When a task matches one of these, call the `skill` tool with its name to read its "
        "instructions before you answer."
    )
    for i, s in enumerate(skills):
        line = f"\n- {s.name}: {_first(s.description, CATALOGUE_DESCRIPTION_CHARS)}"
        # Room for the closing note, unless this is the last line.
        reserve = 0 if i == len(skills) - 1 else estimate(_more(len(skills)))
        if estimate(text + line) + reserve > budget:
            return text + _more(len(skills) - i)
        text += line
    return text


def _more(count: int) -> str:
    return f"\n- … and {count} more: call `skill` with no name for the full list."


def _first(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut[: cut.rindex(" ")] if " " in cut else cut).rstrip(",;:") + "…"


def _tools(tools: Sequence[ToolSpec]) -> str:
    if not tools:
        return ""
    lines = [f"- {t.name}: {(t.description.strip().splitlines() or [''])[0]}" for t in tools]
    return "## Tools you can call\n" + "\n".join(lines)


def _facts(facts: Sequence[Triple], budget: int) -> str:
    """Whole facts, most confident (then most recently updated) first, while they fit."""
    ranked = sorted(facts, key=lambda f: (-f.confidence, -f.updated_at.timestamp()))
    text = "## Known facts"
    for f in ranked:
        line = f"\n- {f.subject} {f.predicate} {f.object}"
        if estimate(text + line) > budget:
            break
        text += line
    return text if "\n" in text else ""


def _now(now: datetime, active_task: str | None) -> str:
    at = now.astimezone(UTC)
    text = f"Now: {at.strftime('%A')}, {at.strftime('%Y-%m-%dT%H:%M')}Z (UTC)."
    if active_task and active_task.strip():
        text += f"\nActive task: {active_task.strip()}"
    return text
