"""The assembled system prompt: order of the parts, each budget, channel hints, date and time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.agent.context import (
    BUDGETS,
    CHANNEL_HINTS,
    ELLIPSIS,
    MAX_TOKENS,
    assemble_system_prompt,
    estimate,
    trim,
)
from shared.models import Triple, WorkspaceConfig
from shared.providers.base import ToolSpec
from shared.safety.injection import SYSTEM_PROMPT_NOTE
from shared.skills import Skill

NOW = datetime(2026, 3, 4, 9, 30, 15, tzinfo=UTC)  # a Wednesday
WS = WorkspaceConfig(id="ws1", system_prompt="You are a test bot.")


def fact(subject: str, obj: str, confidence: float = 1.0) -> Triple:
    return Triple(
        id=f"{subject}-{obj}",
        workspace_id="ws1",
        subject=subject,
        predicate="likes",
        object=obj,
        confidence=confidence,
    )


def tool(name: str, description: str) -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters={"type": "object", "properties": {}})


def test_every_part_in_the_documented_order() -> None:
    ctx = assemble_system_prompt(
        WS,
        skills=[Skill(name="infra-ops", description="Infra.", body="Use kubectl.")],
        tools=[tool("get_weather", "The weather.\nLong details here.")],
        facts=[fact("alice", "tea")],
        channel="telegram",
        now=NOW,
        active_task="ship the release",
        summary="They talked about tea.",
    )
    # The static prefix (cached by the providers) first, then the turn's context.
    assert [name for name, _ in ctx.parts] == [
        "personality",
        "tools",
        "channel",
        "safety",
        "skills",
        "facts",
        "now",
        "summary",
    ]
    markers = [
        "You are a test bot.",
        "- get_weather: The weather.",
        "Channel: Telegram",
        SYSTEM_PROMPT_NOTE,
        "### Skill: infra-ops",
        "- alice likes tea",
        "Now: Wednesday",
        "Active task: ship the release",
        "They talked about tea.",
    ]
    positions = [ctx.text.index(m) for m in markers]
    assert positions == sorted(positions)
    assert ctx.static.endswith(SYSTEM_PROMPT_NOTE) and ctx.text == f"{ctx.static}\n\n{ctx.dynamic}"
    assert ctx.dynamic.startswith("## Skills") and ctx.dynamic.endswith("They talked about tea.")
    assert "Long details here." not in ctx.text  # one line per tool; schemas go to the provider
    assert ctx.parts[0] == ("personality", estimate("You are a test bot."))
    assert ctx.parts[3] == ("safety", estimate(SYSTEM_PROMPT_NOTE))


def test_the_static_prefix_is_the_same_whatever_changes_per_turn() -> None:
    # Given two turns of one session that differ in everything that changes (time, facts, the
    # summary, the loaded skill, the nudge, the pin) and in the order the tools and skills came in
    skills = [Skill(name=n, description=f"{n} things.", body="b") for n in ("zeta", "alpha", "mid")]
    tools = [tool(n, f"{n} tool.") for n in ("web_fetch", "memory_search", "skill")]

    def turn(i: int, order: slice) -> str:
        return assemble_system_prompt(
            WS,
            skills=[skills[i % 3]],
            catalogue=skills[order],
            tools=tools[order],
            facts=[fact("alice", f"tea {i}")],
            now=NOW + timedelta(minutes=17 * i),
            active_task=f"task {i}",
            summary=f"summary {i}",
            nudge=f"nudge {i}",
        ).static

    # Then the static prefix is byte-identical, the catalogue and tools in name order
    prefixes = {turn(i, slice(None, None, 1 if i % 2 else -1)) for i in range(10)}
    [static] = prefixes
    assert static.index("- alpha:") < static.index("- mid:") < static.index("- zeta:")
    assert static.index("- memory_search:") < static.index("- skill:") < static.index("- web_fetch:")
    assert "Now:" not in static and "tea" not in static


def test_empty_parts_are_left_out() -> None:
    ctx = assemble_system_prompt(WS, now=NOW, channel="nowhere")
    assert [name for name, _ in ctx.parts] == ["personality", "safety", "now"]
    assert (
        ctx.text == f"You are a test bot.\n\n{SYSTEM_PROMPT_NOTE}\n\nNow: Wednesday, 2026-03-04T09:30Z (UTC)."
    )


def test_date_and_time_are_utc_with_the_weekday() -> None:
    plus_ten = datetime(2026, 3, 5, 8, 0, tzinfo=timezone(timedelta(hours=10)))  # Wed 22:00 UTC
    ctx = assemble_system_prompt(WS, now=plus_ten)
    assert "Now: Wednesday, 2026-03-04T22:00Z (UTC)." in ctx.text
    assert "Active task" not in ctx.text


@pytest.mark.parametrize(
    ("channel", "expected"),
    [
        ("web", "Markdown renders fully"),
        ("telegram", "4096 characters"),
        ("telegram", "HTML subset"),
        ("slack", "mrkdwn"),
        ("discord", "2000 characters"),
        ("whatsapp", "Mostly plain text"),
    ],
)
def test_channel_hints_per_channel(channel: str, expected: str) -> None:
    ctx = assemble_system_prompt(WS, now=NOW, channel=channel)
    assert expected in ctx.text and CHANNEL_HINTS[channel] in ctx.text
    others = [h for c, h in CHANNEL_HINTS.items() if c != channel]
    assert not any(h in ctx.text for h in others)


def test_trim_cuts_at_a_word_with_an_ellipsis() -> None:
    assert trim("short", 10) == "short"
    cut = trim("word " * 100, 10)
    assert cut.endswith(ELLIPSIS) and estimate(cut) <= 10 and "wor …" not in cut


@pytest.mark.parametrize("part", ["personality", "skills", "tools", "summary", "now"])
def test_each_part_is_trimmed_to_its_budget(part: str) -> None:
    long = "lorem ipsum " * 2000
    ctx = assemble_system_prompt(
        WorkspaceConfig(id="ws1", system_prompt=long) if part == "personality" else WS,
        skills=[Skill(name="big", description="d", body=long)] if part == "skills" else [],
        tools=[tool(f"tool_{i}", "x" * 60) for i in range(100)] if part == "tools" else [],
        now=NOW,
        active_task=long if part == "now" else None,
        summary=long if part == "summary" else "",
    )
    tokens = dict(ctx.parts)[part]
    assert BUDGETS[part] - 10 <= tokens <= BUDGETS[part]
    assert ELLIPSIS in ctx.text and ctx.static.endswith(SYSTEM_PROMPT_NOTE)


def test_facts_are_whole_lines_most_confident_first_within_the_budget() -> None:
    facts = [fact("bob", f"thing number {i}", confidence=i / 100) for i in range(100)]
    ctx = assemble_system_prompt(WS, facts=facts, now=NOW)
    assert dict(ctx.parts)["facts"] <= BUDGETS["facts"]
    lines = [line for line in ctx.text.splitlines() if line.startswith("- bob likes")]
    assert lines[0] == "- bob likes thing number 99" and lines[1] == "- bob likes thing number 98"
    assert 10 < len(lines) < 100 and ELLIPSIS not in ctx.text  # whole facts, never half of one


def test_the_total_is_bounded() -> None:
    long = "lorem ipsum " * 5000
    ctx = assemble_system_prompt(
        WorkspaceConfig(id="ws1", system_prompt=long),
        skills=[Skill(name="big", description=long, body=long)],
        tools=[tool(f"t{i}", long) for i in range(50)],
        facts=[fact("s", f"o{i}") for i in range(500)],
        channel="telegram",
        now=NOW,
        active_task=long,
        summary=long,
    )
    assert ctx.tokens <= MAX_TOKENS
    assert estimate(ctx.text) <= MAX_TOKENS + len(ctx.parts)  # the blank lines between parts
