"""The first hour with Sigil, as scripted sessions against the real `sigil dev` and `sigil` processes:

- the client commands find the gateway wherever `sigil dev --port` put it;
- a stopped model server is named when `sigil dev` starts, and each failed attempt is one log
  line with its cause, no traceback;
- under `sigil dev --aws`, the admin commands reach the running mode's stores: a pairing code
  given in a Telegram chat is approved with `sigil pairing approve`, after `sigil secret set` put
  the bot's secrets there.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.agent.turn import APOLOGY
from tests.e2e.conftest import ROOT, DevGateway, free_port, gateway_env, wait_until
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_platforms import FakePlatforms

SIGIL = str(Path(sys.executable).parent / "sigil")
CLI_TIMEOUT_S = 120.0
TELEGRAM_SECRET = "first-hour-telegram-secret"  # a test value, set by the test itself


def sigil(
    gw: DevGateway, *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A `sigil` command as a person would run it in a second terminal: the same data dir and
    environment as the gateway's, no address or stack given."""
    return subprocess.run(
        [SIGIL, *args, "--data-dir", str(gw.data_dir)],
        check=False,
        cwd=ROOT,
        env=env if env is not None else gw.env,
        input=input,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


# ---------------------------------------------------------------- the address


def test_send_replies_and_web_open_reach_the_port_sigil_dev_was_started_on(gateway: DevGateway) -> None:
    # Given `sigil dev --port P` (the fixture's free port), and no SIGIL_PORT anywhere
    assert "SIGIL_PORT" not in gateway.env and gateway.port != 8787
    # When the client commands run with the data dir alone
    sent = sigil(gateway, "send", "hello there", "--session", "demo", "--wait")
    # Then they reach it
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "hello there"
    # and the session's stored id works on the web channel's commands as its name does
    replies = sigil(gateway, "replies", "--session", "web.demo")
    assert replies.returncode == 0, replies.stderr
    assert [r["text"] for r in json.loads(replies.stdout)["replies"]] == ["hello there"]
    page = sigil(gateway, "web", "open", "--user", "me")
    assert page.returncode == 0, page.stderr
    assert page.stdout.startswith(f"{gateway.url}/#token=")


def test_once_it_stops_the_clients_go_back_to_sigil_port(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    gw = DevGateway(tmp_path / "state", gateway_env(fake_openai)).start()
    record = gw.data_dir / "gateway.json"
    try:
        assert json.loads(record.read_text())["url"] == gw.url
    finally:
        gw.stop()
    # The record goes with the gateway; what the clients try then is SIGIL_HOST:SIGIL_PORT
    assert not record.exists()
    elsewhere = free_port()
    sent = sigil(gw, "send", "anyone?", env=gw.env | {"SIGIL_PORT": str(elsewhere)})
    assert sent.returncode == 1
    assert sent.stderr.strip() == f"no gateway at 127.0.0.1:{elsewhere} (start it with make dev)"


# ---------------------------------------------------------------- a stopped model server


@pytest.fixture
def stopped_model() -> str:
    """The base URL of a model server that has stopped: nothing listens there any more."""
    with FakeOpenAI() as gone:
        return gone.base_url


@pytest.mark.parametrize("mode", [[], ["--aws"]], ids=["embedded", "aws"])
def test_a_stopped_model_server_is_said_at_start_and_each_failure_is_one_line_with_its_cause(
    tmp_path: Path, stopped_model: str, mode: list[str]
) -> None:
    env = gateway_env(None) | {
        "SIGIL_MODEL": "openai/fake-model",
        "OPENAI_BASE_URL": stopped_model,
        "OPENAI_API_KEY": "sk-test",
        "SIGIL_LANE_MAX_ATTEMPTS": "2",
        "SIGIL_PROVIDER_MAX_RETRIES": "0",
        "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "1",
    }
    gw = DevGateway(tmp_path / "state", env, extra_args=mode).start()
    try:
        # Then the banner says what is wrong, in one line, before any message
        [model_line] = [line for line in gw.log_text().splitlines() if line.startswith("  model:")]
        assert model_line == (
            f"  model:    openai/fake-model   ! cannot reach the model server at {stopped_model}: "
            "Connection refused"
        )
        # When a message is sent all the same
        assert gw.post("hello?").status_code == 202
        assert [r["text"] for r in gw.wait_replies(1)] == [APOLOGY]
        # Then each failed attempt's lines name the cause, and nothing prints a traceback
        log = gw.log_text()
        assert "Traceback" not in log
        failed = [line for line in log.splitlines() if "outcome=error" in line]
        assert len(failed) == 2
        assert all(
            "error=the model provider failed (APIConnectionError: Connection refused)" in f for f in failed
        )
    finally:
        gw.stop()


# ---------------------------------------------------------------- admin commands under --aws


@pytest.fixture
def platforms() -> Iterator[FakePlatforms]:
    with FakePlatforms() as fake:
        yield fake


def telegram_update(update_id: int, text: str) -> bytes:
    """A Telegram update as the platform posts it (events/webhook_telegram.json's body)."""
    event = json.loads((ROOT / "events" / "webhook_telegram.json").read_text())
    update = json.loads(event["body"])
    update["update_id"] = update_id
    update["message"]["text"] = text
    return json.dumps(update).encode()


def test_under_aws_mode_a_pairing_code_given_in_chat_is_approved_by_sigil_pairing_approve(
    tmp_path: Path, fake_openai: FakeOpenAI, platforms: FakePlatforms
) -> None:
    # Given `sigil dev --aws` whose workspace asks unknown senders to pair, its Telegram bot
    # talking to a local stand-in of Telegram's API
    config = tmp_path / "sigil.yaml"
    config.write_text("workspaces:\n  default:\n    unknown_sender_policy: pairing\n")
    env = gateway_env(fake_openai) | {
        "SIGIL_CONFIG": str(config),
        "SIGIL_PLATFORM_BASE_URLS": json.dumps(platforms.base_urls),
    }
    gw = DevGateway(tmp_path / "state", env, extra_args=["--aws"]).start()
    try:
        # and the bot's secrets set with `sigil secret set`, which reaches the mode's stores
        for name, value in (
            ("telegram/webhook-secret", TELEGRAM_SECRET),
            ("telegram/bot-token", platforms.tokens["telegram"]),
        ):
            stored = sigil(gw, "secret", "set", name, input=value)
            assert stored.returncode == 0, stored.stderr
        listed = sigil(gw, "secret", "list")
        assert {"telegram/webhook-secret", "telegram/bot-token"} <= set(listed.stdout.split())

        def post(update_id: int, text: str) -> None:
            answer = httpx.post(
                f"{gw.url}/webhooks/telegram",
                content=telegram_update(update_id, text),
                headers={
                    "content-type": "application/json",
                    "x-telegram-bot-api-secret-token": TELEGRAM_SECRET,
                },
                timeout=60,
            )
            assert answer.status_code == 200, answer.text

        # When a stranger writes, they are given a pairing code in the chat
        post(1, "hello, may I talk?")
        assert wait_until(lambda: bool(platforms.shown("telegram")), timeout=120)
        [shown] = platforms.shown("telegram")
        found = re.search(r"Your pairing code is (\S+)\.", shown)
        assert found, shown
        code = found.group(1)

        # Then the admin commands, run as they are against the data dir, see it pending
        pending = sigil(gw, "pairing", "list")
        assert pending.returncode == 0, pending.stderr
        assert code in pending.stdout and "pending" in pending.stdout
        approved = sigil(gw, "pairing", "approve", code)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith("approved telegram:1111111")

        # and the stranger's next message is answered by the model
        post(2, "thanks for letting me in")
        assert wait_until(lambda: "thanks for letting me in" in platforms.shown("telegram"), timeout=120)
        assert sigil(gw, "pairing", "list").stdout == ""  # none pending any more
    finally:
        gw.stop()
