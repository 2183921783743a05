"""Delegation roles (shared.tasks.roles, spec 001): the built-in ones, a workspace's merged over
them by name, the model each resolves to, and what is refused or warned about; through sigil.yaml
(`sigil config validate`, `config apply`'s effective configuration) and `sigil workspace show`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from shared.cli import app
from shared.configuration import effective_configs, load_file
from shared.errors import BadRequest, ModelNotConfigured
from shared.models import DelegationConfig, RoleConfig, RoleLimits, WorkspaceConfig
from shared.tasks.roles import (
    BUILTIN_ROLES,
    DELEGATE_TOOL,
    expand_roles,
    model_for,
    role_for,
    role_warnings,
    roles_for,
)
from shared.tools.builtin import agent_registry

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_MODEL", "SIGIL_DATA_DIR", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def workspace(**delegation: object) -> WorkspaceConfig:
    return WorkspaceConfig(
        id="ws1", model="openai/gpt-4.1", delegation=DelegationConfig.model_validate(delegation)
    )


def test_the_built_in_roles_follow_spec_001() -> None:
    roles = roles_for(workspace())
    assert sorted(roles) == ["researcher", "skill_composer", "worker"]
    assert {name: r.model_class for name, r in roles.items()} == {
        "researcher": "frontier",
        "worker": "fast",
        "skill_composer": "frontier",
    }
    # The researcher only reads; the worker writes within its tools and may ask the user.
    assert not roles["researcher"].interactive and roles["worker"].interactive
    assert "memory_store" not in roles["researcher"].tools and "run_python" not in roles["researcher"].tools
    assert {"memory_search", "web_search", "web_fetch", "scratchpad_read"} <= set(roles["researcher"].tools)
    assert {"memory_store", "run_python"} <= set(roles["worker"].tools)
    # The composer saves its skill with skill_draft, a task agent's own tool (shared.tasks.tools).
    assert "skill_draft" in roles["skill_composer"].tools
    # No role may delegate, and every built-in tool is one a task's registry offers: the agent's
    # and the task agents' own.
    from shared.tasks.tools import TASK_TOOLS

    known = {t.name for t in agent_registry()} | {t.name for t in TASK_TOOLS}
    for role in roles.values():
        assert DELEGATE_TOOL not in role.tools
        assert set(role.tools) <= known


def test_a_workspace_role_merges_over_the_built_in_one_field_by_field() -> None:
    ws = workspace(
        roles={
            "researcher": {"model_class": "cheap", "limits": {"max_tool_calls": 8}},
            "translator": {"description": "Translates", "tools": ["web_fetch"], "model_class": "cheap"},
        }
    )
    roles = roles_for(ws)
    researcher = roles["researcher"]
    builtin = BUILTIN_ROLES["researcher"]
    assert researcher.model_class == "cheap"
    # What it did not set is the built-in's: its tools, instructions and other limits.
    assert researcher.tools == builtin.tools and researcher.instructions == builtin.instructions
    assert researcher.limits == RoleLimits(max_tool_calls=8, max_tokens=builtin.limits.max_tokens)
    assert roles["translator"].tools == ["web_fetch"] and roles["translator"].model_class == "cheap"
    assert roles["worker"] == BUILTIN_ROLES["worker"]
    # The built-ins themselves are never changed by a merge.
    assert BUILTIN_ROLES["researcher"].model_class == "frontier"


def test_an_expanded_role_reads_back_the_same_after_storage() -> None:
    ws = workspace(roles={"researcher": {"model_class": "fast"}})
    stored = ws.model_copy(update={"delegation": expand_roles(ws.delegation)})
    # A stored config comes back with every field set: the merge must give the same role then.
    again = WorkspaceConfig.model_validate_json(stored.model_dump_json())
    assert roles_for(again) == roles_for(ws)
    assert roles_for(again)["researcher"].tools == BUILTIN_ROLES["researcher"].tools
    # Only the roles the section names are stored; the others stay the code's.
    assert sorted(again.delegation.roles) == ["researcher"]


def test_the_model_resolves_through_the_class_then_the_workspace_then_the_gateway() -> None:
    ws = workspace(models={"frontier": "anthropic/claude-sonnet-4-5", "cheap": "openai/gpt-4.1-nano"})
    assert model_for(ws, "researcher") == "anthropic/claude-sonnet-4-5"
    # No mapping for "fast": the workspace's model.
    assert model_for(ws, "worker") == "openai/gpt-4.1"
    bare = WorkspaceConfig(id="ws1")
    assert model_for(bare, "worker", "openai/gateway-default") == "openai/gateway-default"
    with pytest.raises(ModelNotConfigured, match=r"delegation\.models\.fast"):
        model_for(bare, "worker")


def test_an_unknown_role_names_the_known_ones() -> None:
    with pytest.raises(BadRequest, match=r"no role 'critic'.*researcher, skill_composer, worker"):
        role_for(workspace(), "critic")


@pytest.mark.parametrize(
    ("delegation", "message"),
    [
        ({"roles": {"Bad-Name": {}}}, "'Bad-Name' is not a role name"),
        ({"roles": {"helper": {"tools": ["memory_search", "delegate"]}}}, "a task cannot delegate"),
        ({"models": {"fast": "gpt-4.1"}}, "'gpt-4.1' is not provider/model"),
    ],
)
def test_a_role_no_task_could_run_under_is_refused(delegation: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        roles_for(workspace(**delegation))


def test_an_unknown_tool_is_a_warning_not_an_error() -> None:
    tools = ["memory_search", "notes_read", "mcp__notes__read", "web_*"]
    ws = workspace(roles={"helper": {"tools": tools}})
    assert role_warnings(ws, [t.name for t in agent_registry()]) == [
        "workspace ws1: delegation.roles.helper.tools names no known tool: notes_read "
        "(MCP tools are named mcp__<server>__<tool>)"
    ]
    assert roles_for(ws)["helper"].tools == tools


# ---------------------------------------------------------------- sigil.yaml and the CLI

CONFIG = """
defaults:
  model: openai/gpt-4.1-mini
workspaces:
  family:
    delegation:
      models: {frontier: anthropic/claude-sonnet-4-5}
      max_active_per_session: 2
      roles:
        researcher:
          limits: {max_wall_s: 600}
        translator:
          description: Translates a page
          model_class: cheap
          tools: [web_fetch, dictionary]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sigil.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_sigil_yaml_delegation_parses_and_the_effective_config_spells_roles_out(tmp_path: Path) -> None:
    loaded = load_file(write(tmp_path, CONFIG))
    config = effective_configs(loaded)["family"]
    assert config.delegation.max_active_per_session == 2
    researcher = config.delegation.roles["researcher"]
    assert researcher.limits.max_wall_s == 600
    assert researcher.tools == BUILTIN_ROLES["researcher"].tools
    assert researcher.model_class == "frontier"
    assert sorted(config.delegation.roles) == ["researcher", "translator"]
    assert model_for(config, "researcher") == "anthropic/claude-sonnet-4-5"
    assert model_for(config, "translator") == "openai/gpt-4.1-mini"


def test_config_validate_warns_of_an_unknown_role_tool(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "validate", str(write(tmp_path, CONFIG))])
    assert result.exit_code == 0, result.output
    assert (
        "warning: workspace family: delegation.roles.translator.tools names no known tool: dictionary"
        in result.output
    )


def test_config_validate_refuses_a_delegating_role_at_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workspaces:
          family:
            delegation:
              roles:
                helper: {tools: [delegate]}
        """,
    )
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"{path}:4: workspaces.family.delegation: delegation.roles.helper.tools: a task "
        "cannot delegate (only the agent the user talks to can); remove 'delegate'"
    )


def test_workspace_show_prints_the_effective_roles_and_models(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG)
    data_dir = tmp_path / "data"
    applied = runner.invoke(app, ["config", "apply", str(path), "--data-dir", str(data_dir)])
    assert applied.exit_code == 0, applied.output
    shown = runner.invoke(app, ["workspace", "show", "family", "--data-dir", str(data_dir), "-o", "json"])
    assert shown.exit_code == 0, shown.output
    delegation = json.loads(shown.stdout)["delegation"]
    assert sorted(delegation["roles"]) == ["researcher", "skill_composer", "translator", "worker"]
    assert delegation["roles"]["researcher"]["limits"]["max_wall_s"] == 600
    assert delegation["models"] == {
        "frontier": "anthropic/claude-sonnet-4-5",
        "fast": "openai/gpt-4.1-mini",
        "cheap": "openai/gpt-4.1-mini",
    }
    as_yaml = runner.invoke(app, ["workspace", "show", "family", "--data-dir", str(data_dir)])
    assert as_yaml.exit_code == 0, as_yaml.output
    assert yaml.safe_load(as_yaml.stdout)["delegation"]["roles"]["worker"] == RoleConfig.model_validate(
        BUILTIN_ROLES["worker"].model_dump()
    ).model_dump(mode="json")
    assert "# role researcher: frontier -> anthropic/claude-sonnet-4-5;" in as_yaml.stdout
    assert "# role worker: fast -> openai/gpt-4.1-mini;" in as_yaml.stdout


def test_the_examples_commented_delegation_section_is_valid(tmp_path: Path) -> None:
    # sigil.example.yaml shows delegation commented out; uncommented, it must load as it says.
    lines, inside = [], False
    for line in (Path(__file__).resolve().parents[2] / "sigil.example.yaml").read_text().splitlines():
        inside = line.startswith("    # delegation:") or (inside and line.startswith("    #   "))
        lines.append("    " + line[6:] if inside else line)
    path = tmp_path / "sigil.yaml"
    path.write_text("\n".join(lines) + "\n")
    config = effective_configs(load_file(path))["team"]
    assert config.delegation.models["cheap"] == "openai/gpt-4.1-nano"
    assert config.delegation.roles["researcher"].limits.max_tool_calls == 30
    assert config.delegation.roles["translator"].tools == ["web_fetch", "scratchpad_read"]
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 0 and "warning" not in result.output, result.output
