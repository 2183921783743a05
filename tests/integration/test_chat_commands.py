"""Chat commands (docs/commands.md) through the real webhook of each platform, on both backends.

The real gateway (`sigil dev`'s app) on its embedded backend runs the lanes; its senders post to
tests/support/fake_platforms.py (through Settings.platform_base_urls, with the bot tokens in the
gateway's secret store) and its model is the real openai SDK against tests/support/fake_openai.py.
Each delivery is signed as its platform signs it (the signers of test_webhook_channels), from the
command fixtures in tests/fixtures (SOURCES.md says where each comes from), and what a command
answered is read where the user would see it: in the fake platform's chats, or the web outbox.
Every test runs on both backends (the `stack` fixture): there, and on the deployed functions over
moto (LambdaStack): functions.webhook's handler, then the agent handler taking the lane, the
workspace in DynamoDB, its skill in the S3 bucket and its search index on osmem-server.

A command calls no model, spends no budget and keeps no message in the window; it is audited as
"command". /new rolls the window into memory, where memory_search finds it; /model switches the
model only to one of the workspace's model_choices; /status shows the budget left, which drops
after a model turn.
"""

from __future__ import annotations

import copy
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from moto import mock_aws
from osmem_server import OsmemServer
from starlette.testclient import TestClient

from functions.webhook import handler as webhook
from shared import cloud
from shared.adapters.aws import clients
from shared.backend import Backend
from shared.channels import web
from shared.channels.inbound import session_id
from shared.channels.out import PlatformSender
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import BudgetLimits, MemoryConfig, ScopeLimits, Session, WorkspaceConfig
from shared.observability import metrics
from tests.integration.test_channels_end_to_end import TOKEN_SECRETS, run_agent, throttles_on
from tests.integration.test_webhook_channels import (
    SECRETS,
    SIGNED_AT,
    api_event,
    compact,
    discord_headers,
    fixture_bytes,
    fixture_json,
    slack_headers,
    telegram_headers,
    whatsapp_headers,
)
from tests.support.fake_openai import FakeOpenAI, FakeReply, Json, echo_last_user
from tests.support.fake_platforms import DISCORD_APPLICATION, PLATFORMS, FakeClock, FakePlatforms
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision

WS = "default"
WAIT_S = 30.0  # the longest a test waits for a condition (a bound, never a sleep)
MODEL = "openai/fake-model"
LARGER = "openai/fake-model-large"
SKILL = """---
name: trip-planner
description: Plans trips: routes, bookings and packing lists.
---
Plan the trip step by step.
"""
USER_TOKENS_PER_DAY = 50_000
LOCKER = "my locker code is 7731"
ASK = "what was my locker code?"


def wait_until(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def model(body: Json) -> str | FakeReply:
    """The model: a question about the locker searches memory; a tool result is repeated back
    (so the test reads what the search found); anything else is echoed."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"found: {last['content']}"
    if ASK in str(last.get("content")):
        return FakeReply(tool_calls=[("memory_search", {"query": "locker code", "k": 5})])
    return echo_last_user(body)


# ---------------------------------------------------------------- the gateway


class Deployment(ABC):
    """Where the commands go: a webhook to post deliveries to, and the backend the turns run on."""

    model: FakeOpenAI
    platforms: FakePlatforms
    web_secret: str

    @property
    @abstractmethod
    def backend(self) -> Backend: ...

    @abstractmethod
    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        """Deliver one request to the webhook: its status and body."""

    def workspace(self, **changes: Any) -> None:
        config = WorkspaceConfig(
            id=WS,
            model_choices=[LARGER],
            budget=BudgetLimits(
                workspace=ScopeLimits(tokens_per_day=1_000_000),
                user=ScopeLimits(tokens_per_day=USER_TOKENS_PER_DAY, usd_per_month=Decimal("5.00")),
            ),
        )
        self.backend.workspaces.put(config.model_copy(update=changes))

    def session(self, session: str) -> Session:
        found = self.backend.sessions.get(WS, session)
        assert found is not None, session
        return found

    def outcomes(self) -> list[str]:
        return [r.outcome for r in self.backend.audit.list_records(WS)]


@dataclass
class Stack(Deployment):
    """The local gateway: deliveries through its HTTP app, its lane workers answer them."""

    gw: LocalGateway
    client: TestClient
    model: FakeOpenAI
    platforms: FakePlatforms
    web_secret: str

    @property
    def backend(self) -> Backend:
        return self.gw.backend

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        resp = self.client.post(path, content=body, headers=headers)
        return resp.status_code, resp.text


@pytest.fixture(params=["local", "lambda"])
def stack(request: pytest.FixtureRequest) -> Deployment:
    """Each test on both backends: the local gateway, and the functions on moto."""
    found: Deployment = request.getfixturevalue("local_gateway" if request.param == "local" else "on_lambda")
    return found


@pytest.fixture
def local_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_CHANNEL_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAI(model) as fake, FakePlatforms() as platforms:
        data_dir = tmp_path / "state"
        skill = data_dir / "workspaces" / WS / "skills" / "trip-planner" / "SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text(SKILL)
        settings = Settings(
            data_dir=data_dir,
            model=MODEL,
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
        )
        gw = LocalGateway(settings)
        try:
            secret = gw.ensure_workspace(WS)
            store: Any = gw.backend.secrets
            tokens = {
                "telegram/bot-token": platforms.tokens["telegram"],
                "slack/bot-token": platforms.tokens["slack"],
                "whatsapp/access-token": platforms.tokens["whatsapp"],
            }
            for name, value in {**SECRETS, **tokens}.items():
                store.set(name, value)
            # The platforms signed their requests at SIGNED_AT (the published Slack vector's time).
            monkeypatch.setattr(gw.ingress, "clock", lambda: float(SIGNED_AT))
            # The senders' throttles on a clock that sleeping advances: no real waiting between
            # answers in the same chat.
            clock = FakeClock()
            for channel in PLATFORMS:
                sender = gw.deps.senders.get(channel)
                assert isinstance(sender, PlatformSender)
                monkeypatch.setattr(sender, "_clock", clock)
                monkeypatch.setattr(sender, "_sleep", clock.sleep)
            result = Stack(gw, TestClient(gw.app()), fake, platforms, secret)
            result.workspace()
            gw.start()
            yield result
        finally:
            gw.stop()


# ---------------------------------------------------------------- each platform's deliveries


class Chat:
    """One conversation on one platform: deliveries signed as the platform signs them, and the
    answers as the user sees them."""

    name: str
    session: str
    text_commands = True  # a typed "/foo" is a command (no platform mechanism decides)

    def __init__(self, stack: Deployment) -> None:
        self.stack = stack
        self.n = 0

    def post(self, path: str, body: bytes, headers: dict[str, str], content_type: str) -> int:
        return self.stack.post(path, body, {**headers, "content-type": content_type})[0]

    def command(self, name: str, args: str = "") -> None:
        raise NotImplementedError

    def answers(self) -> list[str]:
        return self.stack.platforms.shown(self.name)


class TelegramChat(Chat):
    name = "telegram"
    session = session_id("telegram", "1111111", None)

    def command(self, name: str, args: str = "") -> None:
        update = fixture_json("telegram/update_message_bot_command.json")
        self.n += 1
        update["update_id"] += self.n
        update["message"]["message_id"] += self.n
        # The fixture's own form first (/status@SigilBot), then the plain one.
        if not (name == "status" and self.n == 1):
            update["message"]["text"] = f"/{name} {args}".rstrip()
            update["message"]["entities"][0]["length"] = len(name) + 1
        body = compact(update)
        assert self.post("/webhooks/telegram", body, telegram_headers(body), "application/json") == 200


class SlackChat(Chat):
    name = "slack"
    session = session_id("slack", "C2147483705", None)
    text_commands = False

    def command(self, name: str, args: str = "") -> None:
        form = dict(
            parse_qsl(fixture_bytes("slack/slash_command_status.txt").decode(), keep_blank_values=True)
        )
        self.n += 1
        form.update(command=f"/{name}", text=args, trigger_id=f"{form['trigger_id']}{self.n}")
        if name == "skills":
            # The umbrella form, for a Slack workspace where the short name is taken
            form.update(command="/sigil", text=f"{name} {args}".rstrip())
        body = urlencode(form).encode()
        status = self.post("/webhooks/slack", body, slack_headers(body), "application/x-www-form-urlencoded")
        assert status == 200


class DiscordChat(Chat):
    name = "discord"
    session = session_id("discord", "787053080478613502", None)
    text_commands = False

    def command(self, name: str, args: str = "") -> None:
        data = fixture_json("discord/interaction_chat_input_command.json")
        self.n += 1
        # The fake serves one application's interaction webhooks; each interaction has its own token.
        data.update(
            application_id=DISCORD_APPLICATION, id=f"{data['id']}{self.n}", token=f"{data['token']}{self.n}"
        )
        data["data"]["name"] = name
        data["data"]["options"] = [{"name": "name", "type": 3, "value": args}] if args else []
        body = compact(data)
        status, text = self.stack.post(
            "/webhooks/discord", body, {**discord_headers(body), "content-type": "application/json"}
        )
        # Deferred ("thinking..."): the turn edits the original response with the answer.
        assert (status, json.loads(text)) == (200, {"type": 5})


class WhatsAppChat(Chat):
    name = "whatsapp"
    session = session_id("whatsapp", "16505551234", None)

    def command(self, name: str, args: str = "") -> None:
        self.say(f"/{name} {args}".rstrip())

    def say(self, text: str) -> None:
        note = fixture_json("whatsapp/messages_text_command.json")
        self.n += 1
        msg = note["entry"][0]["changes"][0]["value"]["messages"][0]
        msg["id"] = f"{msg['id']}{self.n}"
        msg["text"]["body"] = text
        body = compact(note)
        assert self.post("/webhooks/whatsapp", body, whatsapp_headers(body), "application/json") == 200


class WebChat(Chat):
    name = "web"
    session = web.session_id_for("s1")

    def command(self, name: str, args: str = "") -> None:
        self.say(f"/{name} {args}".rstrip())

    def say(self, text: str, *, user: str = "u1", session: str = "s1") -> None:
        self.n += 1
        body = json.dumps({"event_id": f"e{self.n}", "session": session, "user": user, "text": text}).encode()
        headers = web.signed_headers(self.stack.web_secret, body, now=SIGNED_AT)
        assert self.post(f"/webhooks/web/{WS}", body, headers, "application/json") == 202

    def answers(self) -> list[str]:
        return [e.message.text for e in self.stack.backend.outbox.read(WS, self.session, after_seq=0)]


CHATS: dict[str, type[Chat]] = {
    "telegram": TelegramChat,
    "slack": SlackChat,
    "discord": DiscordChat,
    "whatsapp": WhatsAppChat,
    "web": WebChat,
}


def answer(chat: Chat, send: Callable[[], None]) -> str:
    """Send one delivery and wait for the one new answer it gets, and for its turn's commit (the
    answer goes out first)."""
    before, turns = len(chat.answers()), len(chat.stack.outcomes())
    send()
    assert wait_until(lambda: len(chat.answers()) > before), f"no answer on {chat.name}"
    assert wait_until(lambda: len(chat.stack.outcomes()) > turns), f"no turn audited on {chat.name}"
    answers = chat.answers()
    assert len(answers) == before + 1, answers
    return answers[-1]


# ---------------------------------------------------------------- every command, every platform


@pytest.mark.parametrize("platform", list(CHATS))
def test_each_command_through_the_platforms_own_webhook(stack: Deployment, platform: str) -> None:
    every_command(CHATS[platform](stack))


def every_command(chat: Chat) -> None:
    """Each command through `chat`'s webhook, answered where its user reads answers."""
    stack = chat.stack

    # /status: the model in effect, the budgets left and when they reset, the skills, the memory policy
    status = answer(chat, lambda: chat.command("status"))
    assert f"Model: {MODEL}" in status
    assert f"{USER_TOKENS_PER_DAY:,} of {USER_TOKENS_PER_DAY:,} tokens" in status
    assert "left today (resets at 00:00 UTC, in" in status
    assert "an estimated $5.00 of $5.00 left this month (resets on" in status
    # and the price those $ are estimated at, with where it comes from: the fake model is served
    # from a local base URL and priced by nobody, so it is free (docs/budgets.md#prices)
    assert f"Price of {MODEL}: free: served from a local base URL" in status
    assert "Workspace budget: 1,000,000 of 1,000,000 tokens left today" in status
    assert "Skills: trip-planner" in status and "Memory: personal" in status

    # /model: the current model and the choices; a choice is taken, anything else refused
    shown = answer(chat, lambda: chat.command("model"))
    assert f"Model: {MODEL}." in shown and f"Choices: {LARGER}." in shown
    assert f"now uses {LARGER}" in answer(chat, lambda: chat.command("model", LARGER))
    assert stack.session(chat.session).model_override == LARGER
    refused = answer(chat, lambda: chat.command("model", "openai/gpt-4o"))
    assert f"openai/gpt-4o is not one of this workspace's models: {LARGER}" in refused
    assert stack.session(chat.session).model_override == LARGER
    assert f"Back to the workspace's model, {MODEL}" in answer(chat, lambda: chat.command("model", "default"))
    assert stack.session(chat.session).model_override is None

    # /skills: name and description
    skills = answer(chat, lambda: chat.command("skills"))
    assert "trip-planner: Plans trips: routes, bookings and packing lists." in skills

    # /new: a fresh window
    assert "Started a fresh conversation" in answer(chat, lambda: chat.command("new"))

    sent = 7
    if chat.text_commands:
        # An unknown command is answered with the list of the known ones
        unknown = answer(chat, lambda: chat.command("frobnicate"))
        assert unknown.startswith("Unknown command /frobnicate. Commands: /status")
        assert "/help" in answer(chat, lambda: chat.command("help"))
        sent += 2

    # None of it called the model, and nothing was kept in the window; each was audited "command"
    assert stack.model.requests == []
    assert stack.session(chat.session).active_messages == []
    assert stack.outcomes() == ["command"] * sent


# ---------------------------------------------------------------- on the Lambda


@dataclass
class LambdaStack(Deployment):
    """The deployed functions on moto: each delivery goes to functions.webhook's handler as API
    Gateway hands it over, then the agent handler takes the lane as the SQS mapping does; the
    workspace, its skill and the secrets are in the stack's DynamoDB, S3 and Secrets Manager."""

    aws: AwsResources
    model: FakeOpenAI
    platforms: FakePlatforms
    web_secret: str

    @property
    def backend(self) -> Backend:
        return cloud.turn_deps().backend

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        channel = path.split("/")[2]
        fields = {k: v for k, v in headers.items() if k != "content-type"}
        event = api_event(channel, body, fields, content_type=headers["content-type"])
        event["rawPath"] = event["requestContext"]["http"]["path"] = path
        response = webhook.lambda_handler(event, LAMBDA_CONTEXT)
        run_agent(self.aws)
        return response["statusCode"], response.get("body") or ""


LAMBDA_CONTEXT: Any = context_for("sigil-webhook")


@pytest.fixture
def on_lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaStack]:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_CHANNEL_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        stack.enter_context(mock_aws())
        fake = stack.enter_context(FakeOpenAI(model))
        platforms = stack.enter_context(FakePlatforms())
        stack.callback(cloud.reset)
        # The stack's search domain: an OpenSearch-compatible server over HTTP (what /new rolls
        # out is indexed there, and memory_search reads it)
        search = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        stack.callback(search.close)
        # The stack's secrets (the platforms', their bot tokens, the web channel's), the model and
        # the platforms
        clients.reset()
        aws = provision("commands")
        web_secret = "web-secret-for-the-lambda_0123456789"
        store = clients.secretsmanager(REGION)
        for name, value in {**SECRETS, **TOKEN_SECRETS, "web/default": web_secret}.items():
            store.create_secret(Name=f"sigil/{name}", SecretString=value)
        settings = aws.settings(
            secrets_prefix="sigil/",
            model=MODEL,
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
            opensearch_endpoint=search.url,
            embedding_model="none",
        )
        # The webhook verifies signatures made at SIGNED_AT, so its clock is pinned there.
        cloud.reset(config=settings, clock=lambda: float(SIGNED_AT))
        deployed = LambdaStack(aws, fake, platforms, web_secret)
        deployed.backend.skills.put_skill(WS, "trip-planner", {"SKILL.md": SKILL.encode()})
        deployed.workspace()
        throttles_on(FakeClock(), patch)
        stack.enter_context(moto_like_aws())
        yield deployed


# ---------------------------------------------------------------- what the commands do


def test_status_shows_the_budget_left_dropping_after_a_model_turn(stack: Deployment) -> None:
    chat = WebChat(stack)
    # Given the budget left before any model turn
    before = answer(chat, lambda: chat.command("status"))
    assert f"Your budget: {USER_TOKENS_PER_DAY:,} of {USER_TOKENS_PER_DAY:,} tokens" in before
    # When a model turn spends tokens
    assert answer(chat, lambda: chat.say("hello there")) == "hello there"
    [record] = [r for r in stack.backend.audit.list_records(WS) if r.outcome == "ok"]
    spent = record.tokens_in + record.tokens_out
    assert spent > 0
    # Then /status shows that much less left, for the user and for the workspace
    after = answer(chat, lambda: chat.command("status"))
    assert f"Your budget: {USER_TOKENS_PER_DAY - spent:,} of {USER_TOKENS_PER_DAY:,} tokens" in after
    assert f"Workspace budget: {1_000_000 - spent:,} of 1,000,000 tokens" in after
    # And the commands spent nothing: only the model turn reached the model, and only it cost anything
    assert len(stack.model.requests) == 1
    # (in tokens: the fake model, served from a local base URL and priced by nobody, costs $0)
    spends = {
        r.outcome: (r.tokens_in + r.tokens_out, r.cost_usd) for r in stack.backend.audit.list_records(WS)
    }
    assert sorted(r.outcome for r in stack.backend.audit.list_records(WS)) == ["command", "command", "ok"]
    assert spends["command"] == (0, 0) and spends["ok"][0] > 0


def test_status_without_budgets_skills_or_personal_memory(stack: Deployment) -> None:
    # Given a workspace with budgets off, none of the installed skills allowed, and team-wide recall
    stack.workspace(budget=None, skills=[], memory=MemoryConfig(recall="workspace"))
    chat = WebChat(stack)
    status = answer(chat, lambda: chat.command("status"))
    # Then /status says so, line by line
    assert status.splitlines()[1:] == [
        "Budget: none (budgets are off in this workspace)",
        "Skills: none",
        "Memory: workspace (everything said in this workspace)",
    ]
    assert answer(chat, lambda: chat.command("skills")) == "No skills are available in this workspace."


def test_new_empties_the_window_and_memory_search_finds_the_old_messages(stack: Deployment) -> None:
    chat = WebChat(stack)
    # Given a conversation of two turns
    assert answer(chat, lambda: chat.say(LOCKER)) == LOCKER
    assert answer(chat, lambda: chat.say("and the weather is fine")) == "and the weather is fine"
    assert len(stack.session(chat.session).active_messages) == 4
    # When the user starts a fresh one
    assert "The previous 4 messages are kept in memory" in answer(chat, lambda: chat.command("new"))
    # Then the window is empty and its messages are in Tier 1
    session = stack.session(chat.session)
    assert session.active_messages == [] and session.rolled_out_count == 4
    rolled = stack.backend.memory.get_messages(WS, chat.session, limit=10)
    assert LOCKER in [r.text for r in rolled]
    # And the next turn starts from nothing, yet memory_search finds what was said before
    found = answer(chat, lambda: chat.say(ASK))
    first_call = stack.model.requests[-2]["messages"]
    assert [m["role"] for m in first_call] == ["system", "user"]
    assert "7731" in found


def test_model_switches_only_to_a_choice_and_the_next_turn_uses_it(stack: Deployment) -> None:
    chat = WebChat(stack)
    # Given a session switched to the workspace's other model
    assert f"now uses {LARGER}" in answer(chat, lambda: chat.command("model", LARGER))
    # When the user writes, the model that answers is that one
    answer(chat, lambda: chat.say("which model?"))
    assert stack.model.requests[-1]["model"] == "fake-model-large"
    # And back on the default, the workspace's
    answer(chat, lambda: chat.command("model", "default"))
    answer(chat, lambda: chat.say("and now?"))
    assert stack.model.requests[-1]["model"] == "fake-model"


def test_model_is_refused_where_the_workspace_offers_no_choices(stack: Deployment) -> None:
    stack.workspace(model_choices=[])
    chat = WebChat(stack)
    shown = answer(chat, lambda: chat.command("model"))
    assert "This workspace offers no other models" in shown
    refused = answer(chat, lambda: chat.command("model", LARGER))
    assert refused == "Switching models is not enabled in this workspace (it lists no model_choices)."
    assert stack.session(chat.session).model_override is None
    records = stack.backend.audit.list_records(WS)
    assert sorted((r.outcome, r.error or "") for r in records) == [
        ("command", ""),
        ("command", "model_choices is empty"),
    ]


def test_a_command_inside_a_sentence_is_ordinary_text_for_the_model(stack: Deployment) -> None:
    chat = WebChat(stack)
    text = "what does /status show?"
    assert answer(chat, lambda: chat.say(text)) == text
    assert len(stack.model.requests) == 1 and stack.outcomes() == ["ok"]


def test_a_sender_not_admitted_gets_no_command_answer(stack: Deployment) -> None:
    # Given a workspace that admits only u1
    stack.workspace(unknown_sender_policy="allow_list", allowed_senders=["web:u1"])
    chat = WebChat(stack)
    # When a stranger sends /status
    chat.say("/status", user="stranger", session="s2")
    stranger = web.session_id_for("s2")
    assert wait_until(lambda: len(stack.outcomes()) == 1)
    # Then they get what any message of theirs gets (the refusal), and nothing of the status
    replies = [e.message.text for e in stack.backend.outbox.read(WS, stranger, after_seq=0)]
    assert all("Model:" not in r and "budget" not in r for r in replies)
    assert stack.outcomes() == ["sender_refused"]
    assert stack.backend.sessions.get(WS, stranger) is None


def test_the_fixtures_are_commands_and_prose_is_not() -> None:
    # The Telegram fixture's entity covers "/status@SigilBot"; the bot's name is not part of the command
    from shared.channels.discord import DiscordChannel
    from shared.channels.inbound import Accepted, WebhookRequest
    from shared.channels.slack import SlackChannel
    from shared.channels.telegram import TelegramChannel
    from shared.channels.whatsapp import WhatsAppChannel

    def parsed(channel: Any, body: bytes) -> Any:
        outcome = channel.parse(WebhookRequest("POST", "/", {}, body))
        assert isinstance(outcome, Accepted)
        return outcome.messages[0]

    tg = parsed(TelegramChannel(WS), fixture_bytes("telegram/update_message_bot_command.json"))
    assert (tg.command.name, tg.command.args, tg.text) == ("status", "", "/status@SigilBot")
    slack = parsed(SlackChannel(WS), fixture_bytes("slack/slash_command_status.txt"))
    assert (slack.command.name, slack.text) == ("status", "/status")
    discord = parsed(DiscordChannel(WS), fixture_bytes("discord/interaction_chat_input_command.json"))
    assert (discord.command.name, discord.command.args) == ("model", "openai/gpt-4.1-mini")
    wa = parsed(WhatsAppChannel(WS), fixture_bytes("whatsapp/messages_text_command.json"))
    assert wa.command.name == "status"

    # Without the bot_command entity, or with it later in the text, a Telegram message is prose
    update = copy.deepcopy(fixture_json("telegram/update_message_bot_command.json"))
    update["message"]["entities"][0]["offset"] = 4
    update["message"]["text"] = "try /status@SigilBot"
    assert parsed(TelegramChannel(WS), compact(update)).command is None
    # /start opens a Telegram chat: a greeting for the model, not a command
    update["message"].update(text="/start", entities=[{"offset": 0, "length": 6, "type": "bot_command"}])
    assert parsed(TelegramChannel(WS), compact(update)).command is None
    # A platform command that is not Sigil's (an operator's /ask) stays text for the model, as before
    discord_ask = fixture_json("discord/interaction_chat_input_command.json")
    discord_ask["data"]["name"] = "ask"
    asked = parsed(DiscordChannel(WS), compact(discord_ask))
    assert (asked.command, asked.text) == (None, "/ask name: openai/gpt-4.1-mini")
    # On Slack, one umbrella command /sigil carries them as its first word; other text is a question
    form = dict(parse_qsl(fixture_bytes("slack/slash_command_status.txt").decode(), keep_blank_values=True))
    for text, expected in (("model openai/x", ("model", "openai/x")), ("what is a lane?", None)):
        body = urlencode({**form, "command": "/sigil", "text": text}).encode()
        found = parsed(SlackChannel(WS), body).command
        assert (None if found is None else (found.name, found.args)) == expected
    # On WhatsApp and the web, /name must open the text and be followed by a space or the end
    for prose in ("what does /status do", "/usr/bin is a path", "/status: is it on?"):
        assert (
            web.parse(
                WS, json.dumps({"event_id": "e1", "session": "s", "user": "u", "text": prose}).encode()
            ).command
            is None
        )
    typed = web.parse(
        WS, json.dumps({"event_id": "e1", "session": "s", "user": "u", "text": "/Model  openai/x "}).encode()
    )
    assert typed.command is not None and (typed.command.name, typed.command.args) == ("model", "openai/x")
