"""The memory nudge (spec 003's memoryNudge) as a pure function of the request's messages."""

from __future__ import annotations

import pytest

from shared.agent.nudge import BEHAVIOURAL, NUDGE, SELF_DISCLOSURE, discloses, memory_nudge
from shared.models import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage

MEMORY_TOOLS = frozenset({"memory_store", "memory_recall", "memory_search"})


def turns(n: int, *, said: str = "what's the weather like", tool: str | None = None) -> list[Message]:
    """`n` answered turns of small talk; with `tool`, each answer calls it first."""
    out: list[Message] = []
    for i in range(n):
        out.append(UserMessage(content=f"{said} {i}"))
        if tool is not None:
            out.append(AssistantMessage(tool_calls=[ToolCall(id=f"c{i}", name=tool, arguments="{}")]))
            out.append(ToolResultMessage(tool_call_id=f"c{i}", name=tool, content="ok"))
        out.append(AssistantMessage(content=f"answer {i}"))
    return out


def test_the_spec_lists_23_self_disclosure_and_12_behavioural_patterns() -> None:
    # Spec 003 says "29 total (17 + 12)" but lists these 35; all of them count.
    assert (len(SELF_DISCLOSURE), len(BEHAVIOURAL)) == (23, 12)
    assert len(set(SELF_DISCLOSURE) | set(BEHAVIOURAL)) == 35


@pytest.mark.parametrize("pattern", [*SELF_DISCLOSURE, *BEHAVIOURAL])
def test_every_pattern_matches_in_a_sentence_in_any_case(pattern: str) -> None:
    assert discloses(f"Well, {pattern.upper()} something, you know.")


@pytest.mark.parametrize(
    "text",
    [
        "What's the taxi amount to the airport?",  # "i am" inside words
        "Remind me about the meeting",  # "i'm" is not "remind"
        "The weather in Lisbon",
        "mycompany.example.org is down",  # "my company" as one word
        "",
    ],
)
def test_words_inside_other_words_do_not_match(text: str) -> None:
    assert not discloses(text)


def test_curly_apostrophes_and_line_breaks_count_as_plain_text() -> None:
    assert discloses("I\u2019m a nurse")
    assert discloses("from now\non, answer in French")


def test_fires_after_ten_answered_turns_on_a_recent_disclosure() -> None:
    messages = [*turns(10), UserMessage(content="By the way, I work at a bakery in Leeds.")]
    assert memory_nudge(messages, memory_tools=MEMORY_TOOLS) == NUDGE


def test_not_before_ten_answered_turns() -> None:
    messages = [*turns(9), UserMessage(content="I work at a bakery in Leeds.")]
    assert memory_nudge(messages, memory_tools=MEMORY_TOOLS) is None


def test_not_without_a_disclosure_among_the_last_ten_user_messages() -> None:
    assert memory_nudge([*turns(12), UserMessage(content="and tomorrow?")], memory_tools=MEMORY_TOOLS) is None
    # Said eleven user messages ago: out of the look-back
    old = [UserMessage(content="My wife is Sam."), AssistantMessage(content="Nice."), *turns(10)]
    assert memory_nudge([*old, UserMessage(content="and tomorrow?")], memory_tools=MEMORY_TOOLS) is None
    # Ten ago (the new message is the tenth): in it
    recent = [*turns(1), UserMessage(content="My wife is Sam."), AssistantMessage(content="Nice."), *turns(8)]
    assert memory_nudge([*recent, UserMessage(content="ok")], memory_tools=MEMORY_TOOLS) == NUDGE


def test_not_when_a_memory_tool_ran_in_the_last_ten_turns() -> None:
    base = turns(10)
    used = [*turns(1, tool="memory_recall"), *turns(8)]
    assert (
        memory_nudge([*base, *used, UserMessage(content="I prefer tea")], memory_tools=MEMORY_TOOLS) is None
    )
    # Eleven turns back (the new message's turn is the tenth): forgotten, so the nudge comes back
    older = [*turns(1, tool="memory_store"), *turns(9)]
    assert (
        memory_nudge([*base, *older, UserMessage(content="I prefer tea")], memory_tools=MEMORY_TOOLS) == NUDGE
    )
    # Any other tool is not a memory tool
    others = [*turns(10, tool="current_time"), UserMessage(content="I prefer tea")]
    assert memory_nudge(others, memory_tools=MEMORY_TOOLS) == NUDGE


def test_nothing_to_nudge_towards_without_memory_tools() -> None:
    messages = [*turns(10), UserMessage(content="Please remember my birthday is in May")]
    assert memory_nudge(messages, memory_tools=frozenset()) is None


def test_the_same_messages_give_the_same_answer() -> None:
    messages = [*turns(10), UserMessage(content="Call me Ada.")]
    assert memory_nudge(messages, memory_tools=MEMORY_TOOLS) == memory_nudge(
        list(messages), memory_tools=MEMORY_TOOLS
    )
