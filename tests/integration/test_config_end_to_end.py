"""Issue 15's end-to-end: one sigil.yaml with two workspaces, two Telegram bots and a Slack app,
applied with `sigil config apply --stack` to a stack on moto (found by its CloudFormation
outputs), then messages to each bot's webhook, signed as each platform signs, through the Lambda
webhook and the agent handler: each lands in its workspace and runs with that workspace's model,
tool permissions and budget. `sigil config diff` after the apply is empty, and the same file
applied to a local data dir shows the same effective configuration as the stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from shared import cloud
from shared.adapters.aws import clients
from shared.cli import app
from shared.observability import metrics
from tests.integration.test_channel_routes import (
    EXTRA_TOKENS,
    FAMILY_CHAT,
    FAMILY_SECRET,
    ROUTE_SECRETS,
    TEAM_SECRET,
    deliver,
    routed_event,
    telegram_update,
)
from tests.integration.test_channels_end_to_end import run_agent, throttles_on
from tests.integration.test_webhook_channels import (
    SECRETS,
    SIGNED_AT,
    fixture_bytes,
    slack_headers,
    telegram_headers,
)
from tests.support.fake_openai import FakeOpenAI, FakeReply
from tests.support.fake_platforms import FakeClock, FakePlatforms
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision
from tests.support.moto_stack import create_stack, outputs

runner = CliRunner()

# The family's turns may not search past conversations and its user may make 3 tool calls a day
# (the model below makes two a turn: the second turn is denied after its calls); the team's may
# search and store only, and its budget is off.
CONFIG = """\
# yaml-language-server: $schema=docs/sigil.schema.json
defaults:
  model: openai/fake-model
workspaces:
  family:
    name: Family
    personality: You are the family's helper.
    model: openai/fake-family
    tools_deny: [memory_search, memory_semantic]
    budget:
      user: {tool_calls_per_day: 3}
  team:
    name: Team
    tools_allow: [memory_search, memory_store]
    budget: null
channels:
  - {platform: telegram, name: family, workspace: family}
  - {platform: telegram, name: team, workspace: team}
  - {platform: slack, name: work, workspace: team, account: "T111"}
"""
STACK = "sigil-config-e2e"


def sigil(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("SIGIL_CONFIG", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "SIGIL_MODEL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "sigil.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def on_moto(config_file: Path) -> Iterator[tuple[AwsResources, FakeOpenAI, FakePlatforms]]:
    """A stack on moto (its resources and its CloudFormation outputs), its secrets set, the
    fake model and platforms; the functions run against it."""
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        stack.enter_context(mock_aws())
        model = stack.enter_context(FakeOpenAI(search_and_recall))
        platforms = stack.enter_context(FakePlatforms(extra_tokens=EXTRA_TOKENS))
        stack.callback(cloud.reset)
        clients.reset()
        aws = provision("config-e2e")
        create_stack(STACK, outputs(aws))
        store = clients.secretsmanager(REGION)
        for name, value in {**SECRETS, **ROUTE_SECRETS}.items():
            store.create_secret(Name=f"{aws.secrets_prefix}{name}", SecretString=value)
        settings = aws.settings(
            model="openai/fake-model",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
        )
        cloud.reset(config=settings, clock=lambda: float(SIGNED_AT))
        throttles_on(FakeClock(), patch)
        stack.enter_context(moto_like_aws())
        yield aws, model, platforms


def search_and_recall(body: dict[str, Any]) -> str | FakeReply:
    """The model's turn: first it calls memory_search and memory_recall, then it answers."""
    if body["messages"][-1]["role"] == "tool":
        return "done"
    return FakeReply(
        tool_calls=[("memory_search", {"query": "plans"}), ("memory_recall", {"topic": "plans"})]
    )


def tool_outcomes(body: dict[str, Any]) -> dict[str, str]:
    """Of a request carrying tool results: each tool's name -> "denied" or "ran"."""
    calls = {c["id"]: c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []}
    return {
        calls[m["tool_call_id"]]: "denied" if "permission_denied" in m["content"] else "ran"
        for m in body["messages"]
        if m["role"] == "tool"
    }


def last_user(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


def test_a_config_applied_to_a_stack_routes_each_bot_with_its_workspaces_model_tools_and_budget(
    on_moto: tuple[AwsResources, FakeOpenAI, FakePlatforms], config_file: Path, tmp_path: Path
) -> None:
    aws, model, _ = on_moto
    where = ["--stack", STACK, "--region", REGION]
    # Given the file applied to the deployed stack, found by its outputs
    status, out = sigil("config", "apply", str(config_file), *where)
    assert status == 0, out
    assert "+ workspace family" in out and "+ route telegram/family" in out
    # Then diff finds nothing left to do, and a second apply changes nothing
    assert sigil("config", "diff", str(config_file), *where) == (0, "no changes\n")
    assert sigil("config", "apply", str(config_file), *where)[1].splitlines()[0] == "no changes"

    # When each bot's platform delivers to its own webhook: two messages to each Telegram bot
    # from the same person, and the Slack app's mention
    family = [telegram_update(30001 + i, FAMILY_CHAT, f"family question {i}") for i in range(2)]
    team = [telegram_update(30101 + i, FAMILY_CHAT, f"team question {i}") for i in range(2)]
    mention = fixture_bytes("slack/event_app_mention.json")
    events = [routed_event("telegram", "family", b, telegram_headers(b, token=FAMILY_SECRET)) for b in family]
    events += [routed_event("telegram", "team", b, telegram_headers(b, token=TEAM_SECRET)) for b in team]
    events.append(routed_event("slack", "work", mention, slack_headers(mention, ts=SIGNED_AT)))
    assert [deliver(e) for e in events] == [(200, "")] * 5
    run_agent(aws)

    audit = cloud.turn_deps().backend.audit
    by_event = {r.event_id: r for ws in ("family", "team") for r in audit.list_records(ws)}
    # Then each turn ran in its bot's workspace: the family's on its own model, its second denied
    # by the family user's budget of 3 tool calls once its own calls reached it (a call past it is
    # not run); the team's on the default model
    outcomes = {e: (r.workspace_id, r.outcome, r.model) for e, r in by_event.items()}
    assert outcomes == {
        "tg30001": ("family", "ok", "openai/fake-family"),
        "tg30002": ("family", "budget_denied", "openai/fake-family"),
        "tg30101": ("team", "ok", "openai/fake-model"),
        "tg30102": ("team", "ok", "openai/fake-model"),
        "Ev111": ("team", "ok", "openai/fake-model"),
    }
    assert by_event["tg30002"].error == "user/day/tool_calls 3/3"
    assert cloud.turn_deps().backend.audit.list_records("default") == []
    # And each workspace's tool permissions held: the family's search denied and its recall run,
    # the team's search run and its recall (not in its allow list) denied
    results = {last_user(body): tool_outcomes(body) for body in model.requests if tool_outcomes(body)}
    assert results == {
        "family question 0": {"memory_search": "denied", "memory_recall": "ran"},
        "family question 1": {"memory_search": "denied", "memory_recall": "ran"},
        "team question 0": {"memory_search": "ran", "memory_recall": "denied"},
        "team question 1": {"memory_search": "ran", "memory_recall": "denied"},
        "Hi there!": {"memory_search": "ran", "memory_recall": "denied"},
    }
    # And the family's personality is its system prompt
    [first] = [body for body in model.requests if last_user(body) == "family question 0"][:1]
    assert "You are the family's helper." in first["messages"][0]["content"]

    # And the same file applied to a local data dir gives the same effective configuration
    local = ["--data-dir", str(tmp_path / "local")]
    assert sigil("config", "apply", str(config_file), *local)[0] == 0
    assert sigil("config", "diff", str(config_file), *local) == (0, "no changes\n")
    for ws in ("family", "team"):
        on_stack = sigil("workspace", "show", ws, "--output", "json", *where)
        on_disk = sigil("workspace", "show", ws, "--output", "json", *local)
        assert on_stack == on_disk and on_stack[0] == 0
        assert json.loads(on_stack[1])["id"] == ws
