"""The record a running `sigil dev` leaves in its data dir (shared.local.running), and what the
commands make of it: the gateway's address, and under --aws the stores `--stack` defaults to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.cli._app import gateway_url, stack_settings
from shared.config import Settings
from shared.local.running import (
    RECORD_FILE,
    GatewayRecord,
    LocalStack,
    client_url,
    listen,
    remove_record,
    running_gateway,
    write_record,
)

STACK = LocalStack(
    endpoint="http://127.0.0.1:5000",
    region="eu-west-1",
    settings={"sessions_table": "sigil-local-sessions", "memory_table": "sigil-local-memory"},
)


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    return int(child.stdout)


def test_the_record_of_a_live_gateway_is_found_and_a_dead_ones_is_not(tmp_path: Path) -> None:
    live = GatewayRecord(pid=os.getpid(), url="http://127.0.0.1:9000", mode="embedded")
    write_record(tmp_path, live)
    assert running_gateway(tmp_path) == live
    assert (tmp_path / RECORD_FILE).stat().st_mode & 0o777 == 0o600
    write_record(tmp_path, live.model_copy(update={"pid": gone_pid()}))
    assert running_gateway(tmp_path) is None


def test_no_record_or_a_foreign_file_is_no_gateway(tmp_path: Path) -> None:
    assert running_gateway(tmp_path) is None
    (tmp_path / RECORD_FILE).write_text("{not json")
    assert running_gateway(tmp_path) is None


def test_a_gateway_removes_only_its_own_record(tmp_path: Path) -> None:
    other = GatewayRecord(pid=os.getppid(), url="http://127.0.0.1:9000", mode="embedded")
    write_record(tmp_path, other)
    remove_record(tmp_path)  # this process is not the one that wrote it
    assert running_gateway(tmp_path) == other
    write_record(tmp_path, other.model_copy(update={"pid": os.getpid()}))
    remove_record(tmp_path)
    assert not (tmp_path / RECORD_FILE).exists()


def test_the_clients_address_is_the_bound_port_on_loopback() -> None:
    sock = listen("0.0.0.0", 0)  # never listened on: bound only to read its address back
    try:
        assert client_url(sock) == f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_the_client_commands_go_where_the_record_says_else_to_sigil_port(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, port=8123)
    assert gateway_url(settings, None) == "http://127.0.0.1:8123"
    write_record(tmp_path, GatewayRecord(pid=os.getpid(), url="http://127.0.0.1:9000", mode="embedded"))
    assert gateway_url(settings, None) == "http://127.0.0.1:9000"
    assert gateway_url(settings, "http://elsewhere:1/") == "http://elsewhere:1"


def test_without_stack_the_running_aws_modes_stores_are_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Restored after the test: the command sets them for its own process
    for name in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_PROFILE", "production")
    # An embedded gateway's record points no admin command anywhere
    write_record(tmp_path, GatewayRecord(pid=os.getpid(), url="http://127.0.0.1:9000", mode="embedded"))
    assert stack_settings(None, None, tmp_path) == {}
    assert os.environ["AWS_PROFILE"] == "production"
    # sigil dev --aws's does: its stores, through moto's endpoint with moto's credentials
    write_record(tmp_path, GatewayRecord(pid=os.getpid(), url="http://127.0.0.1:9000", mode="aws", aws=STACK))
    values = stack_settings(None, None, tmp_path)
    assert values == {"backend": "aws", "AWS_REGION": "eu-west-1", **STACK.settings}
    assert os.environ["AWS_ENDPOINT_URL"] == STACK.endpoint
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
    assert "AWS_PROFILE" not in os.environ
    assert Settings(**values).sessions_table == "sigil-local-sessions"  # type: ignore[arg-type]
