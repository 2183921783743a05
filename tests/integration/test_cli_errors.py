"""The `sigil` commands say what is wrong in one line and exit non-zero (issue 15, item 6): no
gateway, no such session, no such run, no such secret, no web secret for a workspace."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shared.adapters.embedded import FileSecretStore, build_embedded_backend
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.models import WORKSPACE_WIDE, Summary, Triple, new_workspace
from tests.support.consolidation import seed

NOW = datetime(2026, 6, 1, tzinfo=UTC)
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND", "SIGIL_HOST", "SIGIL_PORT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def backend(data_dir: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        yield b
    finally:
        b.close()


def sigil(data_dir: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, [*args, "--data-dir", str(data_dir)], input=input)


def one_line_error(result: Result) -> str:
    """The output of a refused command: a single line, no traceback, no exception escaped."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def secrets_file(data_dir: Path) -> dict[str, str]:
    path = data_dir / "secrets.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ---------------------------------------------------------------- send / replies


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on: bound by the OS, noted, closed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def web_secret(data_dir: Path) -> str:
    data_dir.mkdir(parents=True, exist_ok=True)
    return FileSecretStore(data_dir / "secrets.json").ensure("web/default")


def test_send_without_a_gateway_names_the_address_it_tried(
    data_dir: Path, web_secret: str, free_port: int
) -> None:
    result = sigil(data_dir, "send", "hello", "--url", f"http://127.0.0.1:{free_port}")
    assert result.exit_code == 1
    assert one_line_error(result) == f"no gateway at 127.0.0.1:{free_port} (start it with make dev)"


def test_replies_without_a_gateway_names_the_configured_address(
    data_dir: Path, web_secret: str, free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGIL_PORT", str(free_port))
    result = sigil(data_dir, "replies", "--session", "demo")
    assert result.exit_code == 1
    assert one_line_error(result) == f"no gateway at 127.0.0.1:{free_port} (start it with make dev)"


class _Refuses(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"error": "bad signature"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads the CLI's output
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_gateway_that_refuses_is_reported_with_its_status(
    data_dir: Path, web_secret: str, refusing_server: str
) -> None:
    result = sigil(data_dir, "replies", "--url", refusing_server)
    assert result.exit_code == 1
    assert (
        one_line_error(result)
        == f'the gateway at {refusing_server} answered 401: {{"error": "bad signature"}}'
    )


# ---------------------------------------------------------------- consolidate --session


def test_consolidating_a_session_that_does_not_exist_says_so(backend: Backend, data_dir: Path) -> None:
    result = sigil(data_dir, "consolidate", "--session", "ghost")
    assert result.exit_code == 1
    assert one_line_error(result) == "no session 'ghost' in workspace 'default'"


def test_a_web_session_named_without_its_prefix_is_compacted(backend: Backend, data_dir: Path) -> None:
    # `sigil send --session demo` talks in web.demo: the name as typed is accepted here too
    seed(backend, workspace_id="team", session_id="web.demo", turns=1)
    result = sigil(data_dir, "consolidate", "--workspace", "team", "--session", "demo", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session_id"] == "web.demo"


def test_a_misspelt_session_is_told_the_close_ones(backend: Backend, data_dir: Path) -> None:
    seed(backend, workspace_id="team", session_id="web.demo", turns=1)
    result = sigil(data_dir, "consolidate", "--workspace", "team", "--session", "dmeo")
    assert result.exit_code == 1
    assert one_line_error(result) == "no session 'dmeo' in workspace 'team' (did you mean web.demo?)"


def test_a_name_two_channels_share_is_refused_with_both(backend: Backend, data_dir: Path) -> None:
    seed(backend, workspace_id="team", session_id="web.demo", turns=1)
    seed(backend, workspace_id="team", session_id="telegram.demo", turns=1)
    result = sigil(data_dir, "consolidate", "--workspace", "team", "--session", "demo")
    assert result.exit_code == 1
    assert one_line_error(result) == (
        "session 'demo' is ambiguous in workspace 'team': telegram.demo, web.demo (give the whole id)"
    )


def test_consolidating_a_workspace_nobody_configured_lists_the_known_ones(
    backend: Backend, data_dir: Path
) -> None:
    seed(backend, workspace_id="team", session_id="web.demo", turns=1)
    result = sigil(data_dir, "consolidate", "--workspace", "taem")
    # A usage error (tests/integration/test_cli_unknown_workspace.py has every command's)
    assert result.exit_code == 2
    assert "no workspace 'taem'; the known ones are: default, team" in " ".join(
        line.strip(" │") for line in result.output.splitlines()
    )


# ---------------------------------------------------------------- memory rollback


def test_rolling_back_an_unknown_run_says_so_and_changes_nothing(backend: Backend, data_dir: Path) -> None:
    fact = Triple(
        id="t1",
        workspace_id="default",
        subject="alice",
        predicate="likes",
        object="tea",
        source="consolidation",
        run_id="compact-1",
        created_at=NOW,
        updated_at=NOW,
    )
    backend.memory.put_triples("default", [fact])
    backend.memory.put_summary(
        Summary(
            id="sum1",
            workspace_id="default",
            session_id="dm-alice",
            text="Alice talked about tea.",
            first_seq=0,
            last_seq=49,
            start_at=NOW,
            end_at=NOW,
            run_id="compact-1",
        )
    )

    result = sigil(data_dir, "memory", "rollback", "--run", "compact-2")
    assert result.exit_code == 1
    line = one_line_error(result)
    assert line.startswith("no consolidation run 'compact-2' in workspace 'default'")
    assert [t.id for t in backend.memory.list_triples("default", scope=WORKSPACE_WIDE)] == ["t1"]

    # The run that is there still rolls back; once undone, nothing carries it any more.
    done = sigil(data_dir, "memory", "rollback", "--run", "compact-1")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["deleted_triples"], report["deleted_summaries"]) == (1, 1)
    again = sigil(data_dir, "memory", "rollback", "--run", "compact-1")
    assert again.exit_code == 1
    assert one_line_error(again).startswith("no consolidation run 'compact-1'")


# ---------------------------------------------------------------- secret set / get / delete


def test_setting_an_unknown_secret_is_refused_with_the_known_names(data_dir: Path) -> None:
    result = sigil(data_dir, "secret", "set", "telegram/bot-tokn", input="123:abc")
    assert result.exit_code == 2
    for known in ("telegram/bot-token", "slack/signing-secret", "llm/openai-api-key", "web/<workspace>"):
        assert known in result.output
    assert "Traceback" not in result.output
    assert "telegram/bot-tokn" not in secrets_file(data_dir)
    bad_web = sigil(data_dir, "secret", "set", "web/../x", input="v")
    assert bad_web.exit_code == 2
    assert "invalid workspace id" in bad_web.output

    # The names something reads are still stored: an LLM key, a channel's, a workspace's web secret.
    for name in ("llm/anthropic-api-key", "whatsapp/verify-token", "web/team"):
        stored = sigil(data_dir, "secret", "set", name, input="value-" + name)
        assert stored.exit_code == 0, stored.output
    assert secrets_file(data_dir) == {
        name: "value-" + name for name in ("llm/anthropic-api-key", "whatsapp/verify-token", "web/team")
    }


def test_get_says_whether_a_secret_is_set_without_showing_it(data_dir: Path) -> None:
    token = "123456:" + "A" * 31 + "wxyz"
    assert sigil(data_dir, "secret", "set", "telegram/bot-token", input=token).exit_code == 0

    shown = sigil(data_dir, "secret", "get", "telegram/bot-token")
    assert shown.exit_code == 0
    assert shown.stdout.strip() == f"telegram/bot-token is set: ****wxyz ({len(token)} characters)"
    assert token not in shown.output and token[:8] not in shown.output

    unset = sigil(data_dir, "secret", "get", "slack/bot-token")
    assert unset.exit_code == 1
    assert one_line_error(unset) == "slack/bot-token is not set"

    unknown = sigil(data_dir, "secret", "get", "nope/nothing")
    assert unknown.exit_code == 2
    assert "telegram/bot-token" in unknown.output


def test_a_short_secret_shows_no_characters_at_all(data_dir: Path) -> None:
    assert sigil(data_dir, "secret", "set", "whatsapp/phone-number-id", input="98765").exit_code == 0
    shown = sigil(data_dir, "secret", "get", "whatsapp/phone-number-id")
    assert shown.stdout.strip() == "whatsapp/phone-number-id is set: **** (5 characters)"


def test_delete_asks_first_then_deletes(data_dir: Path) -> None:
    assert sigil(data_dir, "secret", "set", "slack/bot-token", input="xoxb-placeholder").exit_code == 0

    kept = sigil(data_dir, "secret", "delete", "slack/bot-token", input="n\n")
    assert kept.exit_code == 1
    assert "nothing deleted" in kept.output
    assert "slack/bot-token" in secrets_file(data_dir)

    gone = sigil(data_dir, "secret", "delete", "slack/bot-token", "--yes")
    assert gone.exit_code == 0, gone.output
    assert "slack/bot-token" not in secrets_file(data_dir)
    assert sigil(data_dir, "secret", "list").output.split() == []

    missing = sigil(data_dir, "secret", "delete", "slack/bot-token", "--yes")
    assert missing.exit_code == 1
    assert one_line_error(missing) == "slack/bot-token is not set"


# ---------------------------------------------------------------- web-secret


def test_web_secret_of_a_known_workspace_without_one_says_how_to_create_it(
    data_dir: Path, backend: Backend
) -> None:
    # Given a workspace with stored configuration (config apply) but no web secret yet
    backend.workspaces.put(new_workspace("other"))
    result = sigil(data_dir, "web-secret", "-w", "other")
    assert result.exit_code == 2
    line = one_line_error(result)
    assert (
        line
        == "no web signing secret for workspace 'other': create it with `sigil web-secret -w other --create`"
    )


def test_web_secret_of_an_unknown_workspace_lists_the_known_ones_and_how_to_create_it(
    data_dir: Path,
) -> None:
    # The shared check (require_known_workspace), its message ending with the way to make one.
    result = sigil(data_dir, "web-secret", "-w", "other")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    message = " ".join(" ".join(line.strip(" │╭╮╰╯─") for line in result.output.splitlines()).split())
    assert (
        "Invalid value for '--workspace': no workspace 'other'; the known ones are: default; "
        "create it with `sigil web-secret -w other --create`"
    ) in message
    assert "web/other" not in secrets_file(data_dir)


def test_web_secret_create_makes_the_workspace_and_its_secret_once(data_dir: Path) -> None:
    first = sigil(data_dir, "web-secret", "-w", "other", "--create")
    assert first.exit_code == 0, first.output
    secret = first.stdout.strip()
    assert secrets_file(data_dir)["web/other"] == secret
    again = sigil(data_dir, "web-secret", "-w", "other", "--create")
    assert again.stdout.strip() == secret  # created once, then only read
    b = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        assert b.workspaces.get("other") is not None
    finally:
        b.close()


def test_web_secret_create_refuses_a_bad_workspace_id(data_dir: Path) -> None:
    result = sigil(data_dir, "web-secret", "-w", "../x", "--create")
    assert result.exit_code == 2
    assert "invalid workspace id" in result.output
    assert secrets_file(data_dir) == {}


# ---------------------------------------------------------------- --help


def test_each_command_list_shows_every_summary_on_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given every group of `sigil` (the app and its sub-apps), listed wide enough for one row each
    # (TERMINAL_WIDTH, which typer reads when it is imported)
    import inspect

    import typer
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 500)

    def groups(command: object, path: list[str]) -> Iterator[tuple[list[str], dict[str, object]]]:
        children = getattr(command, "commands", None)
        if children:
            yield path, children
            for name, child in children.items():
                yield from groups(child, [*path, name])

    for path, children in groups(typer.main.get_command(app), []):
        shown = runner.invoke(app, [*path, "--help"]).output
        # Then each command's row holds the first paragraph of its help whole, not broken where
        # its docstring is wrapped
        for name, child in children.items():
            summary = " ".join(inspect.cleandoc(getattr(child, "help", None) or "").split("\n\n")[0].split())
            [row] = [line for line in shown.splitlines() if line.startswith(f"│ {name} ")]
            assert summary in row, (path, name, row)
