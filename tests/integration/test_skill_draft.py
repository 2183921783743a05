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
from shared.agent.turn import run_turn
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.memory.scope import owner_scope
from shared.models import (
    WORKSPACE_WIDE,
    DelegationConfig,
    RoleConfig,
    Session,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, TextDelta
from shared.skills import drafts, read_skill
from shared.tasks.items import outcome_item
from shared.tasks.runner import TASK_NOTE
from shared.tools import ToolContext, ToolRegistry
from shared.tools.skill_draft import SKILL_DRAFT_TOOLS
from tests.integration import test_delegation_crash as crash
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


# ---------------------------------------------------------------- in a Skill Composer task


class Composer:
    """The scripted model: the agent delegates to the composer; the composer drafts a broken skill,
    reads the rules it broke, drafts a valid one, and finishes."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, request: ChatRequest) -> list[ProviderEvent]:
        last = request.messages[-1]
        if TASK_NOTE not in request.system:
            if isinstance(last, UserMessage) and last.content.startswith("[Task "):
                return [TextDelta(text=f"Told: {last.content.splitlines()[0][:120]}")]
            if isinstance(last, ToolResultMessage):
                return [TextDelta(text="Started.")]
            return crash.call("delegate", {"role": "skill_composer", "brief": last.content}, "d1")
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if not results:
            return crash.call("skill_draft", {"skill_md": BROKEN}, "k1")
        if len(results) == 1:
            self.errors.append(results[0].content)
            return crash.call(
                "skill_draft", {"skill_md": SKILL_MD, "files": {"references/format.md": FORMAT}}, "k2"
            )
        return crash.call("finish_task", {"summary": "Drafted standup-notes.", "confidence": 0.9}, "fin")


def test_a_skill_composer_task_fixes_what_validation_found_and_leaves_a_draft_in_the_session(
    target: tuple[Backend, list[str]], tmp_path: Path
) -> None:
    backend, _ = target
    roles = {"skill_composer": RoleConfig(instructions="Compose skills.", tools=["skill_draft"])}
    config = WorkspaceConfig(id=crash.WS)
    backend.workspaces.put(
        config.model_copy(update={"delegation": config.delegation.model_copy(update={"roles": roles})})
    )
    composer = Composer()
    deps = crash.deps_for(backend, tmp_path, composer)  # type: ignore[arg-type]
    run_turn(deps, crash.user_item("e1", "Write me a skill for stand-up notes"))
    crash.deliver_until_done(deps, backend)
    task = crash.the_task(backend)
    # Then the composer was shown every rule its first draft broke, and its second was kept
    assert task.status == "done", task
    [error] = composer.errors
    assert "is not a SKILL.md field" in error and "description is required" in error
    assert backend.scratchpad is not None
    assert drafts.names(backend.scratchpad, crash.WS, crash.SESSION) == ["standup-notes"]
    draft = drafts.load(backend.scratchpad, crash.WS, crash.SESSION, "standup-notes")
    assert draft.files["references/format.md"] == FORMAT and draft.turn_id == task.id
    # in the parent's session, not installed: a draft waits for the operator
    assert backend.skills.list_skills(crash.WS) == []
    # And the user is told the task's outcome
    run_turn(deps, outcome_item(task, pii=False))
    assert crash.replies(backend)[-1].startswith(f"Told: [Task {task.id} (skill_composer) finished:")
