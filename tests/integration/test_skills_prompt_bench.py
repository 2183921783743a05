"""bench/skills_prompt.py, the figures of docs/skills.md's "Prompt size with 50 skills": it runs a
real turn on the embedded backend that loads one of 50 installed skills, and what it prints
holds together (the catalogue within its budget and far below every body, the turn's second
request carrying the loaded skill). The figures themselves are the bench's to print, not asserted."""

from __future__ import annotations

import re

import pytest

from bench import skills_prompt
from shared.agent.context import BUDGETS


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_BACKEND", "SIGIL_MODEL", "SIGIL_CONFIG", "SIGIL_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)


def test_the_bench_measures_a_turn_that_loads_one_of_fifty_skills(capsys: pytest.CaptureFixture[str]) -> None:
    skills_prompt.main()
    table = capsys.readouterr().out.split(" tokens\n", 1)[1]
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S.*?)\s{2,}(\d+)", table, re.MULTILINE)}
    assert rows["skills installed"] == rows["skills listed in the catalogue"] == 50
    catalogue = rows["catalogue part of the system prompt"]
    assert 0 < catalogue <= BUDGETS["catalogue"]
    assert rows["every body injected instead (untrimmed)"] > 10 * catalogue
    assert catalogue < rows["system prompt of the turn"] < rows["first request (system + message)"]
    # The second request is the first plus the model's skill call and the quoted body it loaded
    loaded = rows["the loaded skill (tool result, quoted)"]
    assert rows["second request, one skill loaded"] > rows["first request (system + message)"] + loaded
