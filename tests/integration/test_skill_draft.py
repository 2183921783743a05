"""The Skill Composer's `skill_draft` tool (docs/delegation.md#the-skill-composer), on both backends
(the embedded data dir, and DynamoDB / S3 on moto): a broken skill is refused with exactly what
`sigil skill validate` says of the same folder; a valid one is kept as a draft in the session's
scratchpad, which `sigil skill drafts` lists and `sigil skill install-draft` installs; a workspace
that lets the composer install gets the skill at once, though never over an installed one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters import build_backend
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.memory.scope import owner_scope
from shared.models import (
    WORKSPACE_WIDE,
    DelegationConfig,
    Session,
    ToolCall,
    ToolResultMessage,
    WorkspaceConfig,
)
from shared.skills import read_skill
from shared.tools import ToolContext, ToolRegistry
from shared.tools.skill_draft import SKILL_DRAFT_TOOLS
from tests.support import moto_aws
from tests.support.moto_stack import REGION, create_stack, outputs

runner = CliRunner()
WS = "ws1"
SESSION = "web.s1"
SKILL_MD = """---
name: standup-notes
description: Turning a team's stand-up chatter into three short lists (done, doing, blocked).
---
Read the messages of the stand-up and write three lists: done, doing, blocked.
See references/format.md.
"""
FORMAT = "One line an item, the person's name first."
# Three rules broken: a name that is not a name, no description, an unknown field.
BROKEN = """---
name: Standup Notes!
colour: blue
---
Write the lists.
"""


@pytest.fixture(params=["embedded", "aws"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Backend, list[str]]]:
    """The backend the tool runs on, and the CLI options that reach the same stores."""
    if request.param == "embedded":
        settings = Settings(data_dir=tmp_path / "state")
        backend = build_backend(settings)
        try:
            yield backend, ["--data-dir", str(settings.data_dir)]
        finally:
            backend.close()
        return
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        stem = moto_aws.name_for(tmp_path)
        resources = moto_aws.provision(stem)
        create_stack(f"sigil-{stem}", outputs(resources) | {"SkillsBucket": resources.skills_bucket})
        backend = build_backend(resources.settings())
        try:
            if backend.scratchpad is None:
                pytest.fail("the aws backend has no scratchpad")
            yield backend, ["--stack", f"sigil-{stem}", "--region", REGION, "--data-dir", str(tmp_path / "x")]
        finally:
            backend.close()


def draft(backend: Backend, args: dict[str, object], *, installs: bool = False) -> ToolResultMessage:
    workspace = WorkspaceConfig(id=WS, delegation=DelegationConfig(skill_composer_installs=installs))
    backend.workspaces.put(workspace)
    if backend.sessions.get(WS, SESSION) is None:
        # The conversation the composer works in (a task's tools run in its parent's session).
        backend.sessions.save(Session(id=SESSION, workspace_id=WS), expected_version=0)
    ctx = ToolContext(
        workspace_id=WS,
        session_id=SESSION,
        user_id="u1",
        turn_id="task-turn-1",
        backend=backend,
        scope=WORKSPACE_WIDE,
        owner=owner_scope(SESSION, ["u1"], group=False),
    )
    call = ToolCall(id="c1", name="skill_draft", arguments=json.dumps(args))
    return ToolRegistry(SKILL_DRAFT_TOOLS).execute(call, ctx, workspace)


def test_a_broken_skill_is_refused_as_sigil_skill_validate_refuses_it(
    target: tuple[Backend, list[str]], tmp_path: Path
) -> None:
    backend, _ = target
    result = draft(backend, {"skill_md": BROKEN})
    assert result.is_error
    # the same rules, at the same lines, as the CLI finds in the same skill as a folder
    folder = tmp_path / "standup-notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text(BROKEN)
    validated = runner.invoke(app, ["skill", "validate", str(folder)])
    assert validated.exit_code == 1
    cli_rules = [line.split(": ", 1)[1] for line in validated.output.splitlines() if "SKILL.md:" in line]
    assert len(cli_rules) == 3, validated.output
    for rule in cli_rules:
        assert rule in result.content, (rule, result.content)
    # and nothing was kept
    assert backend.scratchpad is not None
    assert backend.scratchpad.list_keys(WS, SESSION) == []
    assert backend.skills.list_skills(WS) == []


def test_a_valid_skill_is_a_draft_the_operator_lists_and_installs(target: tuple[Backend, list[str]]) -> None:
    backend, cli = target
    result = draft(backend, {"skill_md": SKILL_MD, "files": {"references/format.md": FORMAT}})
    assert not result.is_error, result.content
    drafted = json.loads(result.content)
    assert drafted["status"] == "draft" and drafted["files"] == ["SKILL.md", "references/format.md"]
    assert f"sigil skill install-draft standup-notes --session {SESSION} -w {WS}" in drafted["note"]
    # a draft is not a skill: no turn is offered it
    assert backend.skills.list_skills(WS) == []

    listed = runner.invoke(app, ["skill", "drafts", "-w", WS, *cli])
    assert listed.exit_code == 0, listed.output
    assert f"{SESSION}  standup-notes  (2 files)  Turning a team's stand-up chatter" in listed.output
    installed = runner.invoke(app, ["skill", "install-draft", "standup-notes", "-w", WS, *cli])
    assert installed.exit_code == 0, installed.output
    assert f"installed standup-notes in {WS} (2 files) from session {SESSION}'s draft" in installed.output
    skill = read_skill(backend.skills, WS, "standup-notes")
    assert skill.description.startswith("Turning a team's") and "three lists" in skill.body
    assert backend.skills.read_file(WS, "standup-notes", "references/format.md") == FORMAT.encode()
    # the draft is then no longer listed, and installing it again finds none
    assert "no skill drafts in ws1" in runner.invoke(app, ["skill", "drafts", "-w", WS, *cli]).output
    again = runner.invoke(app, ["skill", "install-draft", "standup-notes", "-w", WS, *cli])
    assert again.exit_code == 1 and "no skill draft 'standup-notes' in ws1" in again.output


def test_a_workspace_may_let_the_composer_install_but_never_over_a_skill(
    target: tuple[Backend, list[str]],
) -> None:
    backend, cli = target
    result = draft(backend, {"skill_md": SKILL_MD}, installs=True)
    assert json.loads(result.content)["status"] == "installed"
    assert backend.skills.list_skills(WS) == ["standup-notes"]
    # a second version of an installed skill is a draft: replacing one is the operator's decision
    changed = SKILL_MD.replace("three lists", "four lists")
    second = json.loads(draft(backend, {"skill_md": changed}, installs=True).content)
    assert second["status"] == "draft" and "is installed already" in second["note"]
    assert "three lists" in read_skill(backend.skills, WS, "standup-notes").body
    refused = runner.invoke(app, ["skill", "install-draft", "standup-notes", "-w", WS, *cli])
    assert refused.exit_code == 1 and "already has a skill named 'standup-notes'" in refused.output
    forced = runner.invoke(app, ["skill", "install-draft", "standup-notes", "-w", WS, "--force", *cli])
    assert forced.exit_code == 0, forced.output
    assert "four lists" in read_skill(backend.skills, WS, "standup-notes").body
