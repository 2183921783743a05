"""`sigil secret`: the local gateway's platform tokens go into its data dir, never onto a screen."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from typer.testing import CliRunner

from shared.cli import app


def test_a_secret_set_from_stdin_is_stored_and_listed_by_name_only(tmp_path: Path) -> None:
    runner = CliRunner()
    token = "123456:" + "A" * 35  # a Telegram-shaped placeholder
    stored = runner.invoke(
        app, ["secret", "set", "telegram/bot-token", "--data-dir", str(tmp_path)], input=token
    )
    assert stored.exit_code == 0, stored.output
    assert token not in stored.output
    data = json.loads((tmp_path / "secrets.json").read_text())
    assert data["telegram/bot-token"] == token
    assert stat.S_IMODE((tmp_path / "secrets.json").stat().st_mode) == 0o600
    listed = runner.invoke(app, ["secret", "list", "--data-dir", str(tmp_path)])
    assert listed.exit_code == 0
    assert listed.output.split() == ["telegram/bot-token"]


def test_an_empty_value_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["secret", "set", "slack/bot-token", "--data-dir", str(tmp_path)], input="\n"
    )
    assert result.exit_code == 2
    assert (
        not (tmp_path / "secrets.json").exists()
        or "slack/bot-token" not in (tmp_path / "secrets.json").read_text()
    )
