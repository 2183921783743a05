"""The MCP client (issue 28, docs/mcp.md) against a real MCP server built with the official SDK
(tests/support/mcp_server.py, run in a subprocess), configured in sigil.yaml, through real turns
of a scripted model: on `sigil dev`'s gateway (embedded backend) and on the Lambda handlers over
moto (`sigil config apply --stack`, the webhook, the agent).

What each shows: two of the server's tools called in one turn; a tool the workspace does not
expose refused at execution (the server never sees the call); a server that hangs cut by the
deadline, the turn still answering; a result carrying an injection quoted as untrusted data; a
server that needs a token given each workspace's own from the secret store, never another's.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from shared import cloud
from shared.channels import web
from shared.cli import app
from shared.config import Settings
from shared.configuration import load_file
from shared.deadline import deadline
from shared.errors import DeadlineExceeded
from shared.local.gateway import LocalGateway
from shared.local.mcp_stdio import stdio_transport
from shared.models import WorkspaceConfig
from shared.tools.mcp import McpError, McpToolbox
from tests.integration.test_channel_routes import (
    FAMILY_CHAT,
    FAMILY_SECRET,
    TEAM_SECRET,
    deliver,
    routed_event,
    telegram_update,
)
from tests.integration.test_channels_end_to_end import run_agent
from tests.integration.test_config_end_to_end import on_moto  # noqa: F401 -- the fixture, with this file's config
from tests.integration.test_webhook_channels import telegram_headers
from tests.support.fake_openai import FakeOpenAI, FakeReply
from tests.support.fake_platforms import FakePlatforms
from tests.support.mcp_server import INJECTION, McpTestServer
from tests.support.moto_aws import REGION, AwsResources
from tests.support.moto_stack import moto_stack

runner = CliRunner()
TOKENS = {"family": "family-token-0123456789", "team": "team-token-0123456789"}
# What the scripted model does on a message containing each key.
SCRIPT: dict[str, list[tuple[str, dict[str, Any] | str]]] = {
    "two tools": [("mcp__files__add", {"a": 2, "b": 3}), ("mcp__files__lookup", {"key": "colour"})],
    "drop": [("mcp__files__drop_everything", {})],
    "note": [("mcp__files__note", {})],
    "hang": [("mcp__slow__hang", {})],
    "look up": [("mcp__files__lookup", {"key": "size"})],
}


def servers_yaml(url: str, *, tools: str, slow: bool = True) -> str:
    """One workspace's `mcp:` section: the server as `files` (and as `slow`, its hanging tool
    alone under a 5 s limit), authenticated with the workspace's secret `tok`."""
    text = f"""\
    mcp:
      servers:
        - name: files
          url: {url}
          auth: {{type: bearer, secret: tok}}
          tools: {tools}
"""
    if slow:
        text += f"""\
        - name: slow
          url: {url}
          auth: {{type: bearer, secret: tok}}
          tools: [hang]
          timeout_s: 5
"""
    return text


def scripted(body: dict[str, Any]) -> str | FakeReply:
    if body["messages"][-1]["role"] == "tool":
        return "done"
    said = last_user(body)
    calls = next((c for key, c in SCRIPT.items() if key in said), None)
    return FakeReply(tool_calls=calls) if calls else "no tools for that"


def last_user(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


def results(requests: list[dict[str, Any]], key: str) -> dict[str, str]:
    """The tool results the model was given on the message saying `key`: tool name -> content."""
    [body] = [b for b in requests if key in last_user(b) and b["messages"][-1]["role"] == "tool"]
    names = {c["id"]: c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []}
    return {names[m["tool_call_id"]]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def offered(requests: list[dict[str, Any]], key: str) -> set[str]:
    body = next(b for b in requests if key in last_user(b))
    return {t["function"]["name"] for t in body.get("tools") or []}


def sigil(*args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpTestServer]:
    with McpTestServer(tmp_path_factory.mktemp("mcp"), TOKENS) as running:
        yield running


def calls_since(server: McpTestServer, before: int) -> list[tuple[str, str]]:
    return [(c["tool"], c["token"]) for c in server.calls()[before:]]


# ---------------------------------------------------------------------- sigil dev (embedded)


def test_on_sigil_dev_the_model_calls_two_tools_and_the_client_keeps_its_rules(
    server: McpTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_CONFIG", "SIGIL_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "sigil.yaml"
    config.write_text("workspaces:\n  family:\n" + servers_yaml(server.url, tools="[add, lookup, note]"))
    data_dir = tmp_path / "state"
    # Given the workspace's token in the data dir's secret store, set as an operator sets it
    status, out = sigil(
        "secret", "set", "mcp/family/tok", "--data-dir", str(data_dir), input=TOKENS["family"]
    )
    assert status == 0, out
    before = len(server.calls())
    with FakeOpenAI(scripted) as model:
        settings = Settings(
            data_dir=data_dir,
            model="openai/fake-model",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
        )
        gw = LocalGateway(settings, config=load_file(config))
        secret = gw.ensure_workspace("family")
        gw.start()
        try:
            # When four messages reach the workspace, each asking for other tools
            client = TestClient(gw.app())
            said = ["two tools please", "drop the tables", "read the note", "hang on"]
            for i, text in enumerate(said):
                body = json.dumps(
                    {"event_id": f"e{i}", "session": f"s{i}", "user": "u1", "text": text}
                ).encode()
                resp = client.post(
                    "/webhooks/web/family", content=body, headers=web.signed_headers(secret, body)
                )
                assert resp.status_code == 202, resp.text
            records = wait_for(lambda: gw.backend.audit.list_records("family"), len(said))
        finally:
            gw.stop()
        requests = model.requests
    assert_turns(requests, records)
    # And only the exposed tools reached the server, each with the family's own token
    assert sorted(calls_since(server, before)) == [
        ("add", "family"),
        ("hang", "family"),
        ("lookup", "family"),
        ("note", "family"),
    ]
    # And `sigil mcp list|test` connect as a turn does
    status, out = sigil("mcp", "list", "-w", "family", "--data-dir", str(data_dir))
    assert status == 0, out
    assert "files: " + server.url in out and "mcp__files__add" in out
    assert "drop_everything          (not exposed)" in out
    status, out = sigil("mcp", "test", "files", "-w", "family", "--data-dir", str(data_dir))
    assert status == 0 and "files: ok in" in out and "5 tools, 3 exposed" in out, out


def wait_for(read: Any, count: int) -> list[Any]:
    """`read()` once it holds `count` items (the lane's workers finish in their own time)."""
    limit = time.monotonic() + 120
    while len(found := read()) < count and time.monotonic() < limit:
        time.sleep(0.05)
    assert len(found) == count, found
    return list(found)


def assert_turns(requests: list[dict[str, Any]], records: list[Any]) -> None:
    """What the four turns of both backends' tests show, from the model's side and the audit."""
    # The model is offered the exposed tools under their prefixed names, never the others
    tools = offered(requests, "two tools")
    assert {"mcp__files__add", "mcp__files__lookup", "mcp__files__note", "mcp__slow__hang"} <= tools
    assert "mcp__files__drop_everything" not in tools and "current_time" in tools
    # Two tools in one turn, their results quoted as untrusted data (third-party text)
    two = results(requests, "two tools")
    assert "2 + 3 = 5" in two["mcp__files__add"] and "the value of colour is 42" in two["mcp__files__lookup"]
    assert all("<<<BEGIN UNTRUSTED DATA" in content for content in two.values())
    # A tool the workspace does not expose is refused at execution
    assert '"error":"unknown_tool"' in results(requests, "drop")["mcp__files__drop_everything"]
    # The injection in a result reaches the model fenced, flagged by the scan
    note = results(requests, "note")["mcp__files__note"]
    assert INJECTION in note and note.index("<<<BEGIN UNTRUSTED DATA") < note.index(INJECTION)
    # The hanging server is cut at its deadline and the model told so; the turn still answers
    assert '"error":"deadline_exceeded"' in results(requests, "hang")["mcp__slow__hang"]
    assert {r.outcome for r in records} == {"ok"}
    # The audit names the calls, what went in quoted, and the injection rules the note fired
    assert "tool mcp__files__note" in {source for r in records for source in r.quoted}
    assert any(r.injection_rules.get("tool mcp__files__note") for r in records)
    used = sorted(name for r in records for name in r.tools_used)
    assert used == ["mcp__files__add", "mcp__files__lookup", "mcp__files__note", "mcp__slow__hang"]


# ---------------------------------------------------------------------- the Lambda handlers on moto

STACK = "sigil-config-e2e"  # what test_config_end_to_end's on_moto fixture creates


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: McpTestServer) -> Path:
    """on_moto's file (it applies none itself): the family's and the team's servers, the bots'
    routes as on_moto's secrets sign them."""
    for name in ("SIGIL_CONFIG", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "SIGIL_MODEL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "sigil.yaml"
    path.write_text(
        "defaults:\n  model: openai/fake-model\nworkspaces:\n  family:\n"
        + servers_yaml(server.url, tools="[add, lookup, note]")
        + "  team:\n"
        + servers_yaml(server.url, tools="[lookup]", slow=False)
        + "channels:\n"
        + "  - {platform: telegram, name: family, workspace: family}\n"
        + "  - {platform: telegram, name: team, workspace: team}\n"
        + '  - {platform: slack, name: work, workspace: team, account: "T111"}\n'
    )
    return path


def test_on_the_lambda_handlers_each_workspace_calls_its_servers_with_its_own_token(
    on_moto: tuple[AwsResources, FakeOpenAI, FakePlatforms],  # noqa: F811
    config_file: Path,
    server: McpTestServer,
) -> None:
    aws, model, _ = on_moto
    model.set_default(scripted)
    where = ["--stack", STACK, "--region", REGION]
    # Given the file applied to the stack, and each workspace's token in its Secrets Manager
    status, out = sigil("config", "apply", str(config_file), *where)
    assert status == 0, out
    for ws in ("family", "team"):
        status, out = sigil("secret", "set", f"mcp/{ws}/tok", *where, input=TOKENS[ws])
        assert status == 0, out
    before = len(server.calls())
    # When the family's bot gets four messages and the team's one, through the webhook and the agent
    said = ["two tools please", "drop the tables", "read the note", "hang on"]
    updates = [telegram_update(40001 + i, FAMILY_CHAT, text) for i, text in enumerate(said)]
    events = [
        routed_event("telegram", "family", b, telegram_headers(b, token=FAMILY_SECRET)) for b in updates
    ]
    team = telegram_update(40101, FAMILY_CHAT, "look up the size")
    events.append(routed_event("telegram", "team", team, telegram_headers(team, token=TEAM_SECRET)))
    assert [deliver(e) for e in events] == [(200, "")] * 5
    run_agent(aws)
    # Then the family's turns show what sigil dev's do
    audit = cloud.turn_deps().backend.audit
    assert_turns(model.requests, audit.list_records("family"))
    # And the team's turn is offered its one exposed tool and runs it
    assert {n for n in offered(model.requests, "look up") if n.startswith("mcp__")} == {"mcp__files__lookup"}
    assert "the value of size is 42" in results(model.requests, "look up")["mcp__files__lookup"]
    # And every call reached the server with its own workspace's token, never the other's
    assert sorted(calls_since(server, before)) == [
        ("add", "family"),
        ("hang", "family"),
        ("lookup", "family"),
        ("lookup", "team"),
        ("note", "family"),
    ]
    # And `sigil mcp list|test --stack` connect with the stack's secrets
    status, out = sigil("mcp", "list", "-w", "team", *where)
    assert status == 0 and "lookup                   mcp__files__lookup" in out, out
    status, out = sigil("mcp", "test", "files", "-w", "team", *where)
    assert status == 0 and "5 tools, 1 exposed" in out, out


def test_a_stdio_server_is_refused_by_config_apply_to_a_stack_and_written_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "sigil.yaml"
    path.write_text(
        "workspaces:\n  family:\n    mcp:\n      servers:\n"
        "        - {name: local, command: [my-mcp-server], tools: ['*']}\n"
    )
    with moto_stack(tmp_path) as deployed:
        status, out = sigil("config", "apply", str(path), *deployed.args())
        assert status == 1 and "MCP server 'local' is a local program" in out, out
        assert sigil("workspace", "show", "family", *deployed.args())[0] != 0
    # The same file is fine for `sigil dev`'s data dir
    assert sigil("config", "apply", str(path), "--data-dir", str(tmp_path / "state"))[0] == 0


# ---------------------------------------------------------------------- the toolbox itself


def test_the_turn_deadline_cuts_a_call_whatever_the_servers_own_limit(
    server: McpTestServer,
) -> None:
    workspace = WorkspaceConfig.model_validate(
        {
            "id": "family",
            "mcp": {
                "servers": [
                    {
                        "name": "files",
                        "url": server.url,
                        "tools": ["hang"],
                        "timeout_s": 300,
                        "auth": {"type": "bearer", "secret": "tok"},
                    }
                ]
            },
        }
    )
    toolbox = McpToolbox(DictSecrets({"mcp/family/tok": TOKENS["family"]}))
    [tool] = toolbox(workspace)
    with deadline(time.monotonic() + 1.5), pytest.raises(DeadlineExceeded):
        toolbox.call("family", workspace.mcp.servers[0], "hang", {})
    assert tool.name == "mcp__files__hang"


def test_a_workspace_without_its_token_gets_no_tools_and_never_another_workspaces(
    server: McpTestServer,
) -> None:
    # Given a store holding the family's token only, and the team's config naming the same secret
    secrets = DictSecrets({"mcp/family/tok": TOKENS["family"]})
    team = WorkspaceConfig.model_validate(
        {
            "id": "team",
            "mcp": {
                "servers": [
                    {
                        "name": "files",
                        "url": server.url,
                        "tools": ["*"],
                        "auth": {"type": "bearer", "secret": "tok"},
                    }
                ]
            },
        }
    )
    before = len(server.calls())
    # Then the team's turn gets none of the server's tools: its own secret is not set
    assert McpToolbox(secrets)(team) == []
    with pytest.raises(McpError, match="mcp/team/tok"):
        McpToolbox(secrets).discover(team, team.mcp.servers[0])
    assert calls_since(server, before) == []
    # And a config cannot name another workspace's secret: the name is one path segment
    with pytest.raises(ValueError, match="secret"):
        WorkspaceConfig.model_validate(
            {
                "id": "team",
                "mcp": {
                    "servers": [
                        {
                            "name": "x",
                            "url": server.url,
                            "auth": {"type": "bearer", "secret": "../family/tok"},
                        }
                    ]
                },
            }
        )


def test_oauth_client_credentials_get_a_token_with_the_workspaces_own_client_secret(tmp_path: Path) -> None:
    # Given a server that is an OAuth resource server, its authorization server granting client
    # credentials, and the family's client secret in the store
    with McpTestServer(tmp_path, {"family-client": "family-client-secret"}, oauth=True) as crm:
        issuer = crm.url.removesuffix("/mcp")

        def workspace(ws: str, client_id: str) -> WorkspaceConfig:
            auth = {
                "type": "oauth_client_credentials",
                "client_id": client_id,
                "secret": "crm",
                "issuer": issuer,
            }
            return WorkspaceConfig.model_validate(
                {
                    "id": ws,
                    "mcp": {"servers": [{"name": "crm", "url": crm.url, "auth": auth, "tools": ["add"]}]},
                }
            )

        secrets = DictSecrets({"mcp/family/crm": "family-client-secret", "mcp/team/crm": "a-wrong-secret"})
        family, team = workspace("family", "family-client"), workspace("team", "family-client")
        # Then the family's call gets a token from the authorization server, and the tool runs
        toolbox = McpToolbox(secrets)
        assert [t.name for t in toolbox(family)] == ["mcp__crm__add"]
        assert toolbox.call("family", family.mcp.servers[0], "add", {"a": 4, "b": 5}) == "4 + 5 = 9"
        # And the team's config, naming the family's client id with its own secret, gets nothing
        with pytest.raises(McpError):
            toolbox.discover(team, team.mcp.servers[0])
        assert [(c["tool"], c["token"]) for c in crm.calls()] == [("add", "family-client")]


def test_a_stdio_server_runs_under_sigil_dev_and_is_refused_in_the_cloud(tmp_path: Path) -> None:
    # Given a workspace whose server is a local program (the test server's file, over stdio)
    program = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
    command = [sys.executable, str(program), "stdio", str(tmp_path / "calls.jsonl")]
    workspace = WorkspaceConfig.model_validate(
        {"id": "family", "mcp": {"servers": [{"name": "local", "command": command, "tools": ["add"]}]}}
    )
    [server] = workspace.mcp.servers
    # Then `sigil dev`'s toolbox runs it and calls its tool
    local = McpToolbox(DictSecrets({}), stdio=stdio_transport)
    assert [t.name for t in local(workspace)] == ["mcp__local__add"]
    assert local.call("family", server, "add", {"a": 1, "b": 2}) == "1 + 2 = 3"
    # And the cloud's (no stdio connector) refuses it as a config error, starting nothing
    with pytest.raises(McpError, match="only `sigil dev` runs") as refused:
        McpToolbox(DictSecrets({})).discover(workspace, server)
    assert refused.value.code == "config_error"


class DictSecrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)
