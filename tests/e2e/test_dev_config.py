"""`sigil dev` applies sigil.yaml at start and, as `sigil config diff|apply` do, says which skill a
workspace's `skills:` names that the data dir has not installed (a misspelt name would otherwise
leave the workspace's turns without it, unnoticed)."""

from __future__ import annotations

from pathlib import Path

from shared.adapters.embedded.skills import FileSkillStore
from shared.configuration import load_file, skills_not_installed
from tests.e2e.conftest import DevGateway, gateway_env

SKILL_MD = b"---\nname: trip-notes\ndescription: Notes for trips.\n---\nPack light.\n"


def test_sigil_dev_warns_of_each_skill_the_file_names_that_is_not_installed(tmp_path: Path) -> None:
    # Given a file whose workspace names an installed skill and a misspelt one
    config = tmp_path / "sigil.yaml"
    config.write_text("workspaces:\n  family:\n    skills: [trip-notes, meal-plnner]\n")
    data_dir = tmp_path / "state"
    FileSkillStore(data_dir).put_skill("family", "trip-notes", {"SKILL.md": SKILL_MD})
    # When `sigil dev` starts with it
    gw = DevGateway(data_dir, {**gateway_env(None), "SIGIL_CONFIG": str(config)}).start()
    try:
        log = gw.log_text()
    finally:
        gw.stop()
    # Then its output carries the line `sigil config apply` prints for the misspelt one, only
    [warning] = skills_not_installed(load_file(config), FileSkillStore(data_dir))
    assert warning.startswith("! workspace family: skill 'meal-plnner' is not installed there")
    assert warning in log.splitlines()
    assert "'trip-notes' is not installed" not in log
    assert f"{config.resolve()} applied: workspaces family" in log
