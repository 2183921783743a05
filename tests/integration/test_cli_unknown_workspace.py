"""A workspace a command's target does not know is a usage error (exit 2) that lists the known
ones, on the embedded data dir and on a deployed stack (moto, found from its CloudFormation
outputs): a typo reads as an empty workspace no more (issue 15, item 6; docs/configuration.md).

Known: the default and channel workspaces, one sigil.yaml names, one with a stored configuration
or route, one holding a session (how a cloud workspace without stored configuration shows), one
holding what the command reads (its facts, identities, skills)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shared.adapters import build_backend
from shared.backend import Backend
from shared.cli import app
from shared.cli._app import target_settings
from shared.config import Settings
from shared.models import ChannelRoute, Identity, Session, Triple, WorkspaceConfig, new_workspace
from tests.support.moto_stack import REGION, moto_stack

runner = CliRunner()
KNOWN = "default, family, routed, team"


@dataclass
class Target:
    backend: Backend
    args: list[str]

    def sigil(self, *args: str, input: str | None = None) -> Result:
        return runner.invoke(app, [*args, *self.args], input=input)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_CONFIG",
        "SIGIL_DATA_DIR",
        "SIGIL_BACKEND",
        "SIGIL_DEFAULT_WORKSPACE",
        "SIGIL_CHANNEL_WORKSPACE",
        "SIGIL_SKILLS_BUCKET",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    # The file names one workspace nothing has stored yet.
    (tmp_path / "sigil.yaml").write_text("workspaces:\n  family: {}\n")


@pytest.fixture(params=["embedded", "stack"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "embedded":
        data_dir = tmp_path / "state"
        backend = build_backend(Settings(data_dir=data_dir))
        try:
            yield seeded(Target(backend, ["--data-dir", str(data_dir)]))
        finally:
            backend.close()
        return
    with moto_stack(tmp_path) as stack:
        backend = build_backend(target_settings(None, stack.name, REGION))
        try:
            yield seeded(Target(backend, stack.args()))
        finally:
            backend.close()


def seeded(target: Target) -> Target:
    """team: a stored configuration; routed: a stored route's; chat: a session only (a cloud
    workspace the agent served without stored configuration); facts, people, skills: only what
    `memory`, `pairing`/`identity` and `skill` read."""
    b = target.backend
    b.workspaces.put(WorkspaceConfig(id="team"))
    b.routes.put(ChannelRoute(platform="telegram", name="bot", workspace="routed"))
    b.sessions.save(Session(id="web.s1", workspace_id="chat"), expected_version=0)
    b.memory.put_triple(
        Triple(id="f1", workspace_id="facts", subject="Ada", predicate="likes", object="tea", source="tool")
    )
    b.identities.create(
        Identity(workspace_id="people", channel="telegram", channel_user_id="42", user_id="telegram:42")
    )
    b.skills.put_skill(
        "skills", "notes", {"SKILL.md": b"---\nname: notes\ndescription: Notes.\n---\nBody.\n"}
    )
    return target


def refusal(result: Result) -> str:
    """A usage error's message, its box and wrapping undone; no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(line.strip(" │╭╮╰╯─") for line in result.output.splitlines())
    return " ".join(text.split())


# Every command of the groups that take a workspace, as an admin would type each with a typo.
TYPO_COMMANDS = [
    ["memory", "list", "-w", "taem"],
    ["memory", "share", "f1", "-w", "taem"],
    ["memory", "unshare", "f1", "-w", "taem"],
    ["memory", "erase", "--user", "ada", "--yes", "-w", "taem"],
    ["memory", "rollback", "--run", "run-1", "-w", "taem"],
    ["pairing", "list", "-w", "taem"],
    ["pairing", "approve", "ABCDEFGH", "-w", "taem"],
    ["pairing", "block", "telegram:42", "-w", "taem"],
    ["identity", "list", "-w", "taem"],
    ["identity", "link", "slack:U1", "telegram:42", "-w", "taem"],
    ["identity", "unlink", "telegram:42", "-w", "taem"],
    ["skill", "list", "-w", "taem"],
    ["skill", "remove", "notes", "-w", "taem"],
    ["skill", "validate", "notes", "-w", "taem"],
]


def test_every_command_refuses_an_unknown_workspace_listing_the_known_ones(target: Target) -> None:
    for command in TYPO_COMMANDS:
        message = refusal(target.sigil(*command))
        assert (
            f"Invalid value for '--workspace': no workspace 'taem'; the known ones are: {KNOWN}" in message
        ), (
            command,
            message,
        )
    # ... and a refused command changed nothing.
    assert [i.status for i in target.backend.identities.list_identities("people")] == ["pending"]
    assert target.backend.skills.list_skills("skills") == ["notes"]


def test_skill_copy_and_link_name_the_option_whose_workspace_is_unknown(target: Target) -> None:
    for verb in ("copy", "link"):
        message = refusal(target.sigil("skill", verb, "notes", "--from", "skils", "--to", "team"))
        assert f"Invalid value for '--from': no workspace 'skils'; the known ones are: {KNOWN}" in message
    assert target.backend.skills.list_skills("team") == []


def test_every_way_a_workspace_is_known_is_accepted(target: Target) -> None:
    # The listing ones: configured (file, store, route, default) for every group; by its data,
    # the group that reads that data.
    for ws in ("default", "family", "team", "routed", "chat"):
        for group in ("memory", "pairing", "identity", "skill"):
            result = target.sigil(group, "list", "-w", ws)
            assert result.exit_code == 0, (ws, group, result.output)
    assert target.sigil("memory", "list", "-w", "facts").stdout.startswith("fact f1")
    assert "telegram:42" in target.sigil("pairing", "list", "-w", "people").stdout
    assert "telegram:42" in target.sigil("identity", "list", "-w", "people").stdout
    assert target.sigil("skill", "list", "-w", "skills").stdout.startswith("notes  [auto]")
    # Another group's data does not make a workspace known to this one.
    assert refusal(target.sigil("skill", "list", "-w", "facts"))
    # A skill can be installed into a workspace nothing knows yet: that is how it gets one.
    copied = target.sigil("skill", "copy", "notes", "--from", "skills", "--to", "fresh")
    assert copied.exit_code == 0, copied.output
    assert target.sigil("skill", "list", "-w", "fresh").exit_code == 0


def test_the_channel_workspace_is_known_to_pairing(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    # Platform messages land in SIGIL_CHANNEL_WORKSPACE with no configuration at all.
    monkeypatch.setenv("SIGIL_CHANNEL_WORKSPACE", "inbox")
    result = target.sigil("pairing", "list")
    assert (result.exit_code, result.output) == (0, "no pending senders in workspace 'inbox'\n")


def test_consolidate_refuses_an_unknown_workspace_the_same_way(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    result = runner.invoke(app, ["consolidate", "-w", "taem", "--data-dir", str(data_dir)])
    assert "Invalid value for '--workspace': no workspace 'taem'; the known ones are: default, family" in (
        refusal(result)
    )


def test_workspace_show_refuses_an_unknown_one_and_shows_a_known_one_without_stored_config(
    target: Target,
) -> None:
    message = refusal(target.sigil("workspace", "show", "taem"))
    assert f"Invalid value for 'WORKSPACE': no workspace 'taem'; the known ones are: {KNOWN}" in message
    # chat has sessions and no stored configuration: its turns run on the defaults, shown as such
    shown = target.sigil("workspace", "show", "chat", "-o", "json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == new_workspace("chat").model_dump(mode="json")
    assert "workspace 'chat' has no stored configuration" in shown.stderr
    stored = target.sigil("workspace", "show", "team", "-o", "json")
    assert json.loads(stored.stdout)["id"] == "team" and stored.stderr == ""
