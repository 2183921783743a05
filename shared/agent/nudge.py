"""The memory nudge (spec 003's steering generator memoryNudge): a hint for one turn that the
person has said something about themselves worth storing.

It fires when all three hold, over the messages the model sees (the window and the new message):

- a recent user message (the last 10) matches a self-disclosure pattern ("i work", "my wife",
  "call me" ...) or a behavioural one ("from now on", "please remember" ...), as whole words in
  any case;
- the conversation has at least 10 answered turns (a turn: a user message and what follows it);
- none of the last 10 turns (this one included) called a memory tool.

The hint is ephemeral: the turn puts it in that request's system prompt (shared.agent.context,
part "nudge"), which is never stored; the window, Tier 1, the transcript and the audit record
never hold it, and the next turn decides again. A pure function of the messages: deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Final

from shared.models import AssistantMessage, Message, UserMessage

# Spec 003 lists these (it counts "17" self-disclosure patterns but lists 23, and 12 behavioural).
SELF_DISCLOSURE: Final = (
    "i am",
    "i'm",
    "my name",
    "i work",
    "i live",
    "i prefer",
    "i like",
    "i don't like",
    "i hate",
    "i always",
    "i never",
    "i usually",
    "my job",
    "my company",
    "my team",
    "my wife",
    "my husband",
    "my partner",
    "my email",
    "my phone",
    "my address",
    "call me",
    "i go by",
)
BEHAVIOURAL: Final = (
    "can you always",
    "from now on",
    "don't ever",
    "stop using",
    "start using",
    "going forward",
    "every time",
    "when i ask",
    "please remember",
    "keep in mind",
    "for future",
    "note that i",
)
RECENT_USER_MESSAGES: Final = 10
MIN_ANSWERED_TURNS: Final = 10
TOOL_LOOKBACK_TURNS: Final = 10

NUDGE: Final = (
    "## Memory hint (this turn only)\n"
    "If the user has shared personal facts, preferences or important information recently, "
    "consider storing them with the `memory_store` tool. Only store what is genuinely useful."
)

# Whole words: "i am" must not match "taxi amount". Curly apostrophes count as straight ones.
_PATTERN: Final = re.compile(
    r"(?<!\w)(?:" + "|".join(re.escape(p) for p in (*SELF_DISCLOSURE, *BEHAVIOURAL)) + r")(?!\w)"
)


def discloses(text: str) -> bool:
    """Whether a user message matches one of spec 003's patterns."""
    folded = " ".join(text.casefold().replace("\u2019", "'").replace("\u2018", "'").split())
    return _PATTERN.search(folded) is not None


def memory_nudge(messages: Sequence[Message], *, memory_tools: Collection[str]) -> str | None:
    """NUDGE when spec 003's conditions hold over `messages` (oldest first, the new message last),
    else None. `memory_tools` are the names whose use means the agent is minding its memory; with
    none (the workspace may not store), there is nothing to nudge towards."""
    if not memory_tools:
        return None
    turns = _turns(messages)
    answered = [t for t in turns if any(isinstance(m, AssistantMessage) for m in t)]
    if len(answered) < MIN_ANSWERED_TURNS:
        return None
    for turn in turns[-TOOL_LOOKBACK_TURNS:]:
        for m in turn:
            if isinstance(m, AssistantMessage) and any(c.name in memory_tools for c in m.tool_calls):
                return None
    users = [m for m in messages if isinstance(m, UserMessage)][-RECENT_USER_MESSAGES:]
    return NUDGE if any(discloses(m.content) for m in users) else None


def _turns(messages: Sequence[Message]) -> list[list[Message]]:
    """The messages cut at each user message; what precedes the first one is a turn of its own."""
    turns: list[list[Message]] = []
    for m in messages:
        if isinstance(m, UserMessage) or not turns:
            turns.append([])
        turns[-1].append(m)
    return turns


__all__ = ["BEHAVIOURAL", "NUDGE", "SELF_DISCLOSURE", "discloses", "memory_nudge"]
