"""`sigil config apply | diff` and `sigil workspace list | show` on the embedded backend and on a
deployed stack (moto, found through its CloudFormation outputs): apply is idempotent, diff after
it is empty, routes follow the file, and the same file gives the same effective configuration on
both backends."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.cli import app
from shared.config import Settings
from shared.models import DEFAULT_BUDGET, BudgetLimits, ChannelRoute, ScopeLimits, WorkspaceConfig
from tests.support.moto_stack import MotoStack, moto_stack

runner = CliRunner()

FILE = """
defaults:
  model: openai/gpt-4.1-mini
workspaces:
  family:
    name: Family
    personality: You are the family's assistant.
    active_window: 30
    tools_deny: [web_fetch]
    unknown_sender_policy: pairing
  team:
    name: Team
    model: anthropic/claude-sonnet-4-5
    max_tool_calls_per_turn: 5
    budget:
      workspace: {usd_per_day: "3.50"}
    memory: {recall: workspace}
    skills: [meeting-notes]
    model_choices: [anthropic/claude-haiku-4-5]
channels:
  - {platform: telegram, name: family, workspace: family, account: "7012345678"}
  - platform: telegram
    name: team
    workspace: team
    chats:
      "-100200": {workspace: family}
  - {platform: slack, name: acme, workspace: team, account: T0123}
"""
# The team's skill is not installed in these targets: diff and apply say so, after their work.
NOT_INSTALLED = (
    "! workspace team: skill 'meeting-notes' is not installed there (installed: none; "
    "`sigil skill install ... -w team`)"
)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_MODEL", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "SIGIL_DEFAULT_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    # No sigil.yaml of the developer's is read by the commands that look in the working directory.
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config" / "sigil.yaml"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(FILE).lstrip())
    return path


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[MotoStack]:
    with moto_stack(tmp_path) as deployed:
        yield deployed


def sigil(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_apply_then_diff_is_empty_and_a_second_apply_changes_nothing(
    tmp_path: Path, config_file: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "state")]
    status, out = sigil("config", "diff", str(config_file), *data)
    assert status == 0
    # Each new workspace with its effective budget: the family's is the default, the team's the
    # default with its one limit changed (the file gives only workspace.usd_per_day)
    assert out.splitlines() == [
        "+ workspace family (create)",
        "    budget: workspace: 5,000,000 tokens a day, an estimated $10.00 a day; "
        "each user: 1,000,000 tokens a day, an estimated $2.00 a day",
        "+ workspace team (create)",
        "    budget: workspace: 5,000,000 tokens a day, an estimated $3.50 a day; "
        "each user: 1,000,000 tokens a day, an estimated $2.00 a day",
        "+ route slack/acme (create)",
        "+ route telegram/family (create)",
        "+ route telegram/team (create)",
        NOT_INSTALLED,
    ]
    status, out = sigil("config", "apply", str(config_file), *data)
    assert status == 0, out
    assert f"applied 5 changes to the local data dir {tmp_path / 'state'}" in out
    assert sigil("config", "diff", str(config_file), *data) == (0, f"no changes\n{NOT_INSTALLED}\n")
    status, out = sigil("config", "apply", str(config_file), *data)
    assert status == 0
    assert out.splitlines() == [
        "no changes",
        NOT_INSTALLED,
        f"applied 0 changes to the local data dir {tmp_path / 'state'}",
    ]

    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        family = backend.workspaces.get("family")
        team = backend.workspaces.get("team")
        routes = backend.routes.list_routes()
    finally:
        backend.close()
    # Defaults filled in: the file's default model, DEFAULT_BUDGET where the file sets none.
    assert family == WorkspaceConfig(
        id="family",
        name="Family",
        system_prompt="You are the family's assistant.",
        model="openai/gpt-4.1-mini",
        active_window=30,
        tools_deny=["web_fetch"],
        unknown_sender_policy="pairing",
        budget=DEFAULT_BUDGET,
    )
    assert team is not None and team.model == "anthropic/claude-sonnet-4-5"
    # The team's partial budget (workspace: usd_per_day) is DEFAULT_BUDGET with that one limit
    # changed: the default's token cap and every per-user cap stay (issue 26), not dropped.
    assert team.budget == BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=5_000_000, usd_per_day=Decimal("3.50")),
        user=DEFAULT_BUDGET.user,
    )
    assert (team.skills, team.model_choices, team.memory.recall) == (
        ["meeting-notes"],
        ["anthropic/claude-haiku-4-5"],
        "workspace",
    )
    assert [r.key for r in routes] == ["slack/acme", "telegram/family", "telegram/team"]
    assert routes[2].chats["-100200"].workspace == "family"


def test_a_route_removed_from_the_file_is_deleted_and_an_unnamed_workspace_left_alone(
    tmp_path: Path, config_file: Path
) -> None:
    data = ["--data-dir", str(tmp_path / "state")]
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        backend.workspaces.put(WorkspaceConfig(id="legacy", name="Old"))
        backend.routes.put(ChannelRoute(platform="discord", name="old", workspace="legacy"))
    finally:
        backend.close()
    assert sigil("config", "apply", str(config_file), *data)[0] == 0

    edited = config_file.read_text()
    edited = edited.replace("  - {platform: slack, name: acme, workspace: team, account: T0123}\n", "")
    edited = edited.replace("active_window: 30", "active_window: 40")
    config_file.write_text(edited)
    status, out = sigil("config", "diff", str(config_file), *data)
    assert status == 0
    assert out.splitlines() == [
        "~ workspace family",
        "    active_window: 30 -> 40",
        "= workspace legacy: not in the file, left alone",
        "- route slack/acme (delete)",
        NOT_INSTALLED,
    ]
    status, out = sigil("config", "apply", str(config_file), *data)
    assert status == 0
    # Each change as it is written, then what was left alone.
    assert out.splitlines() == [
        "~ workspace family",
        "    active_window: 30 -> 40",
        "- route slack/acme (delete)",
        "= workspace legacy: not in the file, left alone",
        NOT_INSTALLED,
        f"applied 2 changes to the local data dir {tmp_path / 'state'}",
    ]
    assert sigil("config", "diff", str(config_file), *data) == (
        0,
        f"= workspace legacy: not in the file, left alone\nno changes\n{NOT_INSTALLED}\n",
    )
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        assert [r.key for r in backend.routes.list_routes()] == ["telegram/family", "telegram/team"]
        assert backend.workspaces.get("legacy") == WorkspaceConfig(id="legacy", name="Old")
        family = backend.workspaces.get("family")
        assert family is not None and family.active_window == 40
    finally:
        backend.close()


def test_the_same_file_gives_identical_effective_configs_on_embedded_and_on_a_stack(
    tmp_path: Path, config_file: Path, stack: MotoStack
) -> None:
    local = ["--data-dir", str(tmp_path / "state")]
    assert sigil("config", "apply", str(config_file), *local)[0] == 0
    status, out = sigil("config", "apply", str(config_file), *stack.args())
    assert status == 0, out
    assert f"applied 5 changes to stack {stack.name}" in out
    assert sigil("config", "diff", str(config_file), *stack.args()) == (0, f"no changes\n{NOT_INSTALLED}\n")

    listed_local, listed_stack = sigil("workspace", "list", *local), sigil("workspace", "list", *stack.args())
    assert listed_local == listed_stack
    assert listed_local[1].split() == [
        "WORKSPACE", "MODEL", "NAME",
        "family", "openai/gpt-4.1-mini", "Family", "team", "anthropic/claude-sonnet-4-5", "Team",
    ]  # fmt: skip
    for workspace in ("family", "team"):
        for output in ("yaml", "json"):
            shown_local = sigil("workspace", "show", workspace, "-o", output, *local)
            shown_stack = sigil("workspace", "show", workspace, "-o", output, *stack.args())
            assert shown_local[0] == shown_stack[0] == 0
            # The same, but for the model's price, shown for the local target only: it is this
            # machine's settings' price, and a stack's functions price by their own environment
            assert _unpriced(shown_local[1]) == shown_stack[1]
    family = json.loads(sigil("workspace", "show", "family", "-o", "json", *stack.args())[1])
    assert (family["id"], family["model"], family["active_window"]) == ("family", "openai/gpt-4.1-mini", 30)

    # The routes too: the stack's RouteStore holds what the embedded one does.
    from shared.adapters.aws.dynamodb import DynamoRouteStore

    backend = build_embedded_backend(Settings(data_dir=tmp_path / "state"))
    try:
        local_routes = backend.routes.list_routes()
    finally:
        backend.close()
    assert DynamoRouteStore(stack.resources.sessions_table, region="us-east-1").list_routes() == local_routes


def _unpriced(shown: str) -> str:
    return "".join(line for line in shown.splitlines(keepends=True) if not line.startswith("# price of "))


def test_show_of_an_unknown_workspace_lists_the_known_ones(tmp_path: Path, config_file: Path) -> None:
    data = ["--data-dir", str(tmp_path / "state")]
    assert sigil("config", "apply", str(config_file), *data)[0] == 0
    status, out = sigil("workspace", "show", "famly", *data)
    # A usage error, as every command's unknown workspace (test_cli_unknown_workspace.py); the
    # default workspace is known too (messages land there with no configuration at all)
    assert status == 2
    assert "no workspace 'famly'; the known ones are: default, family, team" in " ".join(
        out.replace("│", " ").split()
    )


def test_a_workspace_with_no_model_shows_the_gateways_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sigil.yaml"
    path.write_text("workspaces:\n  plain: {}\n")
    data = ["--data-dir", str(tmp_path / "state")]
    assert sigil("config", "apply", *data)[0] == 0  # ./sigil.yaml, the default file
    monkeypatch.setenv("SIGIL_MODEL", "openai/gpt-4.1")
    shown = json.loads(sigil("workspace", "show", "plain", "-o", "json", *data)[1])
    assert shown["model"] == "openai/gpt-4.1"
    assert shown["budget"] == DEFAULT_BUDGET.model_dump(mode="json")
    assert sigil("workspace", "list", *data) == (
        0,
        f"{'WORKSPACE':<24}  {'MODEL':<40}  NAME\n{'plain':<24}  openai/gpt-4.1 (default)\n",
    )


@pytest.mark.parametrize("target", ["local", "stack"])
def test_a_skill_a_workspace_names_but_the_target_lacks_is_pointed_out(
    tmp_path: Path, target: str, request: pytest.FixtureRequest
) -> None:
    # Given a file whose workspace lets one installed skill and one misspelt name through
    path = tmp_path / "skills.yaml"
    path.write_text("workspaces:\n  family:\n    skills: [pdf-forms, trip-planer]\n")
    skill_md = "---\nname: pdf-forms\ndescription: Reading PDF forms.\n---\nBody.\n"
    source = tmp_path / "src" / "pdf-forms"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(skill_md)
    where = ["--data-dir", str(tmp_path / "state")]
    if target == "stack":
        where = request.getfixturevalue("stack").args()
    assert sigil("skill", "install", str(source), "-w", "family", *where)[0] == 0
    # When it is compared and applied
    for command in ("diff", "apply"):
        result = runner.invoke(app, ["config", command, str(path), *where])
        # Then each says which name lets no skill through, and still does its work
        assert result.exit_code == 0, result.output
        assert (
            "! workspace family: skill 'trip-planer' is not installed there (installed: pdf-forms; "
            "`sigil skill install ... -w family`)"
        ) in result.stderr.splitlines()
        assert "pdf-forms'" not in result.stderr
    assert sigil("config", "diff", str(path), *where) == (
        0,
        "no changes\n! workspace family: skill "
        "'trip-planer' is not installed there (installed: pdf-forms; `sigil skill install ... -w family`)\n",
    )


def test_a_partial_budget_keeps_the_defaults_and_diff_and_show_give_the_effective_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a workspace that sets one limit of its budget, on a model an Ollama server serves
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.delenv("SIGIL_MODEL_PRICES", raising=False)
    path = tmp_path / "sigil.yaml"
    path.write_text(
        "workspaces:\n  team:\n    model: openai/llama3.1:8b\n"
        '    budget: {workspace: {usd_per_day: "5.00"}}\n'
    )
    data = ["--data-dir", str(tmp_path / "state")]
    assert sigil("config", "apply", *data)[0] == 0
    # When it is shown, then its budget is the default's with that limit changed, the token cap
    # and every per-user cap kept (issue 26), said in words with its $ marked as estimates, and
    # the model's price says where it comes from: a local server's model nobody priced is free
    status, shown = sigil("workspace", "show", "team", *data)
    assert status == 0
    effective = (
        "workspace: 5,000,000 tokens a day, an estimated $5.00 a day; "
        "each user: 1,000,000 tokens a day, an estimated $2.00 a day"
    )
    assert shown.splitlines()[-2:] == [
        f"# budget: {effective}",
        "# price of openai/llama3.1:8b: free: served from a local base URL and priced by nobody "
        "(declare a price to count spend)",
    ]
    # When the file turns the workspace's token cap off (a limit given as null), then the diff
    # shows the budget before and after in words, whole
    path.write_text(
        path.read_text().replace('usd_per_day: "5.00"', 'usd_per_day: "5.00", tokens_per_day: null')
    )
    assert sigil("config", "diff", *data) == (
        0,
        "~ workspace team\n"
        f"    budget: {effective} -> workspace: an estimated $5.00 a day; "
        "each user: 1,000,000 tokens a day, an estimated $2.00 a day\n",
    )
