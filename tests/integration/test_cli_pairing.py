"""`sigil pairing list | approve | block` against a real data dir, through typer's CliRunner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.cli import app
from shared.config import Settings
from shared.identity import resolve_sender
from shared.models import InboundMessage, LaneItem, Sender, WorkspaceConfig
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider

WS = "default"
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_CHANNEL_WORKSPACE", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def backend(data_dir: Path) -> Iterator[Backend]:
    # The gateway's backend on the same data dir, open while the CLI runs, as with `sigil dev`
    b = build_embedded_backend(Settings(data_dir=data_dir))
    b.workspaces.put(WorkspaceConfig(id=WS, unknown_sender_policy="pairing"))
    yield b
    b.close()


def inbound(
    sender: str, *, workspace: str = WS, name: str | None = "Ada", event: str = "e1"
) -> InboundMessage:
    return InboundMessage(
        event_id=event,
        channel="telegram",
        workspace_id=workspace,
        session_id=f"telegram.{sender}",
        sender=Sender(id=sender, name=name),
        chat_id=sender,
        text="hello",
    )


def first_contact(backend: Backend, sender: str, *, workspace: str = WS) -> str:
    config = backend.workspaces.get(workspace) or WorkspaceConfig(
        id=workspace, unknown_sender_policy="pairing"
    )
    resolve_sender(backend.identities, config, inbound(sender, workspace=workspace))
    found = backend.identities.get(workspace, "telegram", sender)
    assert found is not None and found.pairing_code is not None
    return found.pairing_code


def sigil(data_dir: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["pairing", *args, "--data-dir", str(data_dir)])
    return result.exit_code, result.stdout, result.stderr


def test_list_shows_pending_senders_with_their_codes(backend: Backend, data_dir: Path) -> None:
    code = first_contact(backend, "42")
    other = first_contact(backend, "43")
    status, out, _ = sigil(data_dir, "list")
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{code}  pending") and "telegram:42  as telegram:42  Ada" in lines[0]
    assert lines[1].startswith(other)


def test_approve_admits_the_sender_as_the_named_user(backend: Backend, data_dir: Path) -> None:
    code = first_contact(backend, "42")
    status, out, _ = sigil(data_dir, "approve", code.lower(), "--user", "alice")
    assert status == 0
    assert out.strip() == "approved telegram:42  as alice  Ada"
    stored = backend.identities.get(WS, "telegram", "42")
    assert stored is not None and (stored.status, stored.user_id, stored.pairing_code) == (
        "approved",
        "alice",
        None,
    )
    # Nobody is pending any more; --all still lists them
    status, out, err = sigil(data_dir, "list")
    assert (status, out) == (0, "")
    assert "no pending senders in workspace 'default'" in err
    status, out, _ = sigil(data_dir, "list", "--all")
    assert out.startswith("-         approved") and "as alice" in out


def test_an_unknown_code_is_an_error(backend: Backend, data_dir: Path) -> None:
    first_contact(backend, "42")
    status, out, err = sigil(data_dir, "approve", "ZZZZ2222")
    assert status == 1 and out == ""
    assert "no pending sender has pairing code 'ZZZZ2222'" in err


def test_block_by_code_or_channel_user(backend: Backend, data_dir: Path) -> None:
    code = first_contact(backend, "42")
    status, out, _ = sigil(data_dir, "block", code)
    assert (status, out.strip()) == (0, "blocked telegram:42  as telegram:42  Ada")
    status, out, _ = sigil(data_dir, "block", "slack:U666")
    assert (status, out.strip()) == (0, "blocked slack:U666  as slack:U666")
    blocked = backend.identities.list_identities(WS, status="blocked")
    assert [(i.channel, i.channel_user_id) for i in blocked] == [("slack", "U666"), ("telegram", "42")]
    status, _, err = sigil(data_dir, "block", "fax:1")
    assert status == 1 and "not a valid identity: channel" in err


def test_the_workspace_defaults_to_the_channel_workspace(
    backend: Backend, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = first_contact(backend, "42", workspace="family")
    # Not in the default workspace...
    status, _, err = sigil(data_dir, "approve", code)
    assert status == 1 and "'default'" in err
    # ...but where the platform channels deliver, when that is set
    monkeypatch.setenv("SIGIL_CHANNEL_WORKSPACE", "family")
    status, out, _ = sigil(data_dir, "list")
    assert status == 0 and code in out
    # Or named
    monkeypatch.delenv("SIGIL_CHANNEL_WORKSPACE")
    status, out, _ = sigil(data_dir, "approve", code, "--workspace", "family")
    assert status == 0 and out.startswith("approved telegram:42")


def test_an_approval_applies_to_the_running_gateways_next_turn(backend: Backend, data_dir: Path) -> None:
    model = FunctionProvider(lambda request: "welcome")

    def provider(ref: str | None) -> tuple[Provider, str]:
        return model, "test-model"

    deps = TurnDeps(
        backend=backend,
        settings=Settings(data_dir=data_dir),
        senders=SenderRegistry({"telegram": OutboxSender(backend.outbox)}),
        provider_factory=provider,
    )
    assert run_turn(deps, LaneItem(inbound=inbound("42", event="e1"))).outcome == "pairing_required"
    [pending] = backend.identities.list_identities(WS)
    assert pending.pairing_code is not None
    assert sigil(data_dir, "approve", pending.pairing_code, "--user", "alice")[0] == 0
    record = run_turn(deps, LaneItem(inbound=inbound("42", event="e2")))
    assert (record.outcome, record.user_id) == ("ok", "alice")
    assert len(model.requests) == 1
