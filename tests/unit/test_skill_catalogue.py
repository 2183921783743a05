"""The prompt's catalogue of skills (shared.agent.context): name and description of each skill a
turn may load in name order, manual ones left out (a directly loaded one stays listed, so the
cached prefix does not change), cut to its budget with a note."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.agent.context import BUDGETS, CATALOGUE_DESCRIPTION_CHARS, assemble_system_prompt
from shared.models import WorkspaceConfig
from shared.skills import Skill, catalogue, select_skills

NOW = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
WS = WorkspaceConfig(id="ws1")
AUTO = Skill(name="notes", description="Taking meeting notes.", body="NOTES BODY")
KEYWORD = Skill(
    name="k8s", description="Kubernetes.", trigger="keyword", keywords=("kubectl",), body="K8S BODY"
)
MANUAL = Skill(name="infra-ops", description="Infra.", trigger="manual", body="INFRA BODY")


def prompt(text: str, skills: list[Skill]) -> str:
    return assemble_system_prompt(
        WS, skills=select_skills(skills, text), catalogue=catalogue(skills), now=NOW
    ).text


def test_the_catalogue_lists_auto_and_keyword_skills_but_no_body() -> None:
    text = prompt("hello", [AUTO, KEYWORD, MANUAL])
    assert "- k8s: Kubernetes.\n- notes: Taking meeting notes." in text  # in name order
    assert "infra-ops" not in text
    assert not any(body in text for body in ("NOTES BODY", "K8S BODY", "INFRA BODY"))


def test_a_directly_loaded_skill_is_in_the_prompt_and_still_listed() -> None:
    loaded = prompt("use skill: infra-ops, and kubectl please", [AUTO, KEYWORD, MANUAL])
    plain = prompt("hello", [AUTO, KEYWORD, MANUAL])
    assert "### Skill: infra-ops" in loaded and "INFRA BODY" in loaded and "K8S BODY" in loaded
    # The catalogue is the same either way: it is part of the prefix the providers cache
    assert "- k8s:" in loaded and "- notes: Taking meeting notes." in loaded
    assert loaded.split("Now: ")[0].split("## Skills\n")[0] == plain.split("Now: ")[0]


def test_a_long_description_is_cut_and_a_long_list_ends_with_a_note() -> None:
    long = Skill(name="long", description="word " * 300)
    many = [Skill(name=f"skill-{i:03d}", description="d " * 70) for i in range(200)]
    parts = dict(assemble_system_prompt(WS, catalogue=[long, *many], now=NOW).parts)
    assert parts["catalogue"] <= BUDGETS["catalogue"]
    text = assemble_system_prompt(WS, catalogue=[long, *many], now=NOW).text
    line = next(x for x in text.splitlines() if x.startswith("- long:"))
    assert len(line) <= len("- long: ") + CATALOGUE_DESCRIPTION_CHARS and line.endswith("…")
    shown = sum(1 for x in text.splitlines() if x.startswith("- skill-"))
    assert 0 < shown < 200
    assert f"- … and {200 - shown} more: call `skill` with no name for the full list." in text
