"""Named channel routes (issue 15): several bots per platform, each its own secrets, webhook path
and workspace, and per-chat overrides.

Two Telegram bots ("family" into workspace family, "team" into workspace team) and one Slack app
("work" into team, pinned to its team id), plus a WhatsApp number and a Discord application for
the handshake and account checks. Deliveries are the fixtures of tests/fixtures (Telegram's text
update with its chat and text varied, Slack's signed app_mention, WhatsApp's signed notification,
Discord's command), signed as each platform signs (the signers of test_webhook_channels). They
go through the Lambda webhook on moto, then the agent handler (test_channels_end_to_end's
runtime), and through the local gateway's HTTP app with its lane workers running: both times each
message must land in its route's (or its chat's) workspace and be answered with its own bot's
token, which the fake platform servers record.

The configuration is a sigil.yaml applied with `sigil config apply`'s code (shared.configuration):
its workspaces (the family's with its own model) and routes go to the stack's stores on moto (the
routes into the sessions table) and to the data directory's locally, as `sigil dev` applies it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from starlette.testclient import TestClient
from typer.testing import CliRunner

from functions.webhook import handler as webhook
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.embedded import FileSecretStore
from shared.backend import Backend
from shared.cli import app as cli_app
from shared.config import Settings
from shared.configuration import apply, load_text
from shared.errors import NotFound
from shared.ingress import Ingress, WebhookRequest
from shared.ingress.http import WebhookFront
from shared.ingress.routes import cached_routes
from shared.local.gateway import LocalGateway
from shared.models import ChannelRoute, LaneItem
from shared.observability import metrics
from tests.integration.test_channels_end_to_end import run_agent, throttles_on
from tests.integration.test_webhook_channels import (
    DISCORD_PUBLIC_HEX,
    SECRETS,
    SIGNED_AT,
    SLACK_SECRET,
    WHATSAPP_SECRET,
    api_event,
    compact,
    discord_command_variant,
    discord_headers,
    fixture_bytes,
    fixture_json,
    slack_headers,
    telegram_headers,
    whatsapp_headers,
)
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_platforms import (
    DISCORD_APPLICATION,
    DictSecrets,
    FakeClock,
    FakePlatforms,
    Recorded,
)
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision

CONTEXT: Any = context_for("sigil-webhook")
WAIT_S = 30.0

FAMILY_CHAT, GRANDMA_CHAT, TEAM_GROUP = 1111111, 2222222, -1003333333
# The configuration as an operator writes it (docs/configuration.md), applied to each backend with
# `sigil config apply`'s code. The family workspace has its own model; the team's is the default.
CONFIG = f"""
defaults:
  model: openai/fake-model
workspaces:
  family:
    model: openai/fake-family
  team: {{}}
channels:
  - platform: telegram
    name: family
    workspace: family
    chats:
      # Grandma's chat runs on a smaller model.
      "{GRANDMA_CHAT}": {{model: openai/fake-small}}
  - platform: telegram
    name: team
    workspace: team
    chats:
      # A group the team bot is in, whose conversation belongs with the family's.
      "{TEAM_GROUP}": {{workspace: family}}
  # The fixture's team and app (slack/event_app_mention.json: team_id T111, api_app_id A111).
  - {{platform: slack, name: work, workspace: team, account: "T111"}}
  # The fixture's business number (whatsapp/messages_text_notification.json).
  - {{platform: whatsapp, name: shop, workspace: team, account: "106540352242922"}}
  # The Discord application the fake platform serves.
  - {{platform: discord, name: helper, workspace: team, account: "{DISCORD_APPLICATION}"}}
"""
SIGIL_FILE = load_text(CONFIG)
ROUTES: list[ChannelRoute] = list(SIGIL_FILE.channels)

FAMILY_SECRET = "family-bot-secret-token_0123456789"
TEAM_SECRET = "team-bot-secret-token_9876543210"
FAMILY_TOKEN = "111111:FAMILY-bot-token"
TEAM_TOKEN = "222222:TEAM-bot-token"
WORK_TOKEN = "xoxb-work-slack-token"
SHOP_VERIFY = "shop-verify-token"
# Each route's secrets, by the names ChannelRoute.secret_name gives them. The unnamed routes'
# (SECRETS) are stored too, and no unnamed bot token: a reply sent with it would fail.
ROUTE_SECRETS = {
    "telegram/family/webhook-secret": FAMILY_SECRET,
    "telegram/team/webhook-secret": TEAM_SECRET,
    "slack/work/signing-secret": SLACK_SECRET,
    "whatsapp/shop/app-secret": WHATSAPP_SECRET,
    "whatsapp/shop/verify-token": SHOP_VERIFY,
    "discord/helper/public-key": DISCORD_PUBLIC_HEX,
    "telegram/family/bot-token": FAMILY_TOKEN,
    "telegram/team/bot-token": TEAM_TOKEN,
    "slack/work/bot-token": WORK_TOKEN,
}
EXTRA_TOKENS = {"telegram": [FAMILY_TOKEN, TEAM_TOKEN], "slack": [WORK_TOKEN]}


def telegram_update(update_id: int, chat: int, text: str) -> bytes:
    """The fixture's text update from its user, in `chat` (a group when negative), saying `text`."""
    data = fixture_json("telegram/update_message_text.json")
    data["update_id"] = update_id
    message = data["message"]
    message.update(message_id=update_id, text=text)
    message["chat"] = {"id": chat, "type": "group" if chat < 0 else "private", "first_name": "Test"}
    return compact(data)


TO_FAMILY = telegram_update(20001, FAMILY_CHAT, "hello family bot")
TO_TEAM = telegram_update(20002, FAMILY_CHAT, "hello team bot")  # the same person, the other bot
FROM_GRANDMA = telegram_update(20003, GRANDMA_CHAT, "hello from grandma")
IN_TEAM_GROUP = telegram_update(20004, TEAM_GROUP, "hello from the group")
SLACK_MENTION = fixture_bytes("slack/event_app_mention.json")

# What each delivery must become: (workspace, session, model) and the reply's sender.
LANDS = {
    "tg20001": ("family", f"telegram.{FAMILY_CHAT}", "openai/fake-family"),
    "tg20002": ("team", f"telegram.{FAMILY_CHAT}", "openai/fake-model"),
    "tg20003": ("family", f"telegram.{GRANDMA_CHAT}", "openai/fake-small"),
    "tg20004": ("family", f"telegram.{TEAM_GROUP}", "openai/fake-family"),  # the family's model
    "Ev111": ("team", "slack.C111", "openai/fake-model"),
}
# The model echoes the user's text (fake_openai's default), so each reply names its message.
TELEGRAM_REPLIES = {
    (FAMILY_TOKEN, FAMILY_CHAT, "hello family bot"),
    (TEAM_TOKEN, FAMILY_CHAT, "hello team bot"),
    (FAMILY_TOKEN, GRANDMA_CHAT, "hello from grandma"),
    (TEAM_TOKEN, TEAM_GROUP, "hello from the group"),
}


def deliveries(slack_ts: int) -> list[tuple[str, str, bytes, dict[str, str]]]:
    """(platform, route, body, headers) of the five messages, Slack's signed at `slack_ts`."""
    return [
        ("telegram", "family", TO_FAMILY, telegram_headers(TO_FAMILY, token=FAMILY_SECRET)),
        ("telegram", "team", TO_TEAM, telegram_headers(TO_TEAM, token=TEAM_SECRET)),
        ("telegram", "family", FROM_GRANDMA, telegram_headers(FROM_GRANDMA, token=FAMILY_SECRET)),
        ("telegram", "team", IN_TEAM_GROUP, telegram_headers(IN_TEAM_GROUP, token=TEAM_SECRET)),
        ("slack", "work", SLACK_MENTION, slack_headers(SLACK_MENTION, ts=slack_ts)),
    ]


def other_team(body: bytes) -> bytes:
    """The Slack delivery as another workspace's install of an app would send it."""
    data = json.loads(body)
    data.update(team_id="T999", api_app_id="A999")
    data["event"]["team"] = "T999"
    return compact(data)


def other_number(body: bytes) -> bytes:
    data = json.loads(body)
    data["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999999999999999"
    return compact(data)


# ---------------------------------------------------------------- what the replies were


def telegram_posts(platforms: FakePlatforms) -> set[tuple[str, int, str]]:
    """(the token that called, chat, text) of each Telegram message posted."""
    return {
        (r.path.split("/")[1].removeprefix("bot"), int(r.json["chat_id"]), str(r.json["text"]))
        for r in platforms.calls("telegram", "sendMessage")
    }


def slack_posts(platforms: FakePlatforms) -> list[Recorded]:
    return platforms.calls("slack", "chat.postMessage")


def assert_replies(platforms: FakePlatforms) -> None:
    # Each bot answered its own chats with its own token, and nothing was refused by a platform
    assert telegram_posts(platforms) == TELEGRAM_REPLIES
    [slack] = slack_posts(platforms)
    assert slack.headers["authorization"] == f"Bearer {WORK_TOKEN}"
    assert (slack.json["channel"], slack.status) == ("C111", 200)
    assert all(r.status == 200 for r in platforms.requests)


def assert_landed(backend: Backend, model: FakeOpenAI) -> None:
    # Each message's turn ran in its workspace, on its session, with its chat's model
    for event_id, (workspace, session, model_ref) in LANDS.items():
        [record] = [r for r in backend.audit.list_records(workspace) if r.event_id == event_id]
        assert (record.session_id, record.outcome, record.model) == (session, "ok", model_ref), event_id
        assert backend.sessions.get(workspace, session) is not None
    # ... and in no other workspace
    for other in ("default", "family", "team"):
        found = {r.event_id for r in backend.audit.list_records(other)}
        assert found == {e for e, (w, _, _) in LANDS.items() if w == other}, other
    # The model was asked as the workspaces and chats say: grandma's turn on her chat's model, the
    # family's others on the family's, the team's on the default
    asked = {_last_user(body): body["model"] for body in model.requests}
    assert asked == {
        "hello family bot": "fake-family",
        "hello team bot": "fake-model",
        "hello from grandma": "fake-small",
        "hello from the group": "fake-family",
        "Hi there!": "fake-model",
    }


def _last_user(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


# ---------------------------------------------------------------- through the Lambda webhook on moto


def routed_event(platform: str, route: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """api_event's delivery, to /webhooks/{platform}/{route} as the HTTP API routes it."""
    event = api_event(platform, body, headers)
    path = f"/webhooks/{platform}/{route}"
    event["routeKey"] = event["requestContext"]["routeKey"] = "POST /webhooks/" + platform + "/{name}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {"name": route}
    return event


def deliver(event: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    response = webhook.lambda_handler(event, CONTEXT)
    body = response.get("body") or ""
    is_json = response.get("headers", {}).get("Content-Type") == "application/json"
    return response["statusCode"], json.loads(body) if is_json else body


@pytest.fixture
def on_moto() -> Iterator[tuple[AwsResources, FakeOpenAI, FakePlatforms]]:
    """The webhook and agent functions on moto, routes given, the fake model and platforms."""
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        stack.enter_context(mock_aws())
        model = stack.enter_context(FakeOpenAI())
        platforms = stack.enter_context(FakePlatforms(extra_tokens=EXTRA_TOKENS))
        stack.callback(cloud.reset)
        clients.reset()
        aws = provision("routes")
        store = clients.secretsmanager(REGION)
        for name, value in {**SECRETS, **ROUTE_SECRETS}.items():
            store.create_secret(Name=f"sigil/{name}", SecretString=value)
        settings = aws.settings(
            secrets_prefix="sigil/",
            model="openai/fake-model",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
        )
        cloud.reset(config=settings, clock=lambda: float(SIGNED_AT))
        # The file applied to the stack's stores (its workspaces, and its routes in the sessions table)
        backend = cloud.turn_deps().backend
        apply(SIGIL_FILE, backend.workspaces, backend.routes)
        clock = FakeClock()
        throttles_on(clock, patch)
        stack.enter_context(moto_like_aws())
        yield aws, model, platforms


def queued(aws: AwsResources) -> int:
    attributes = clients.sqs(REGION).get_queue_attributes(
        QueueUrl=aws.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_each_bot_delivers_into_its_workspace_and_is_answered_with_its_token_on_the_lambda(
    on_moto: tuple[AwsResources, FakeOpenAI, FakePlatforms],
) -> None:
    aws, model, platforms = on_moto
    # When each bot's platform delivers to its own webhook
    answers = [deliver(routed_event(*d)) for d in deliveries(SIGNED_AT)]
    assert answers == [(200, "")] * 5
    # And the agent takes the lanes
    handed = run_agent(aws)
    # Then each message was queued into its route's (or its chat's) workspace, naming its route
    by_event = {item.inbound.event_id: item.inbound for item in handed}
    assert {e: (i.workspace_id, i.session_id) for e, i in by_event.items()} == {
        e: (w, s) for e, (w, s, _) in LANDS.items()
    }
    assert {e: i.reply_context["route"] for e, i in by_event.items()} == {
        "tg20001": "family",
        "tg20002": "team",
        "tg20003": "family",
        "tg20004": "team",  # another workspace's conversation, still the team bot's chat
        "Ev111": "work",
    }
    assert by_event["tg20003"].model == "openai/fake-small"
    # And its turn ran there, and its reply went out with its bot's token
    assert_landed(cloud.turn_deps().backend, model)
    assert_replies(platforms)


def test_the_lambda_refuses_a_wrong_secret_an_unknown_route_and_another_account(
    on_moto: tuple[AwsResources, FakeOpenAI, FakePlatforms],
) -> None:
    aws, _, _ = on_moto
    # Bot A's secret token on bot B's webhook, and a made-up one: not B's signature
    crossed = routed_event("telegram", "team", TO_TEAM, telegram_headers(TO_TEAM, token=FAMILY_SECRET))
    assert deliver(crossed) == (401, {"error": "unauthorized", "message": "signature mismatch"})
    wrong = routed_event("telegram", "team", TO_TEAM, telegram_headers(TO_TEAM, token="guess"))
    assert deliver(wrong)[0] == 401
    # A route nobody declared: a typed 404, for a well-formed name and for any other path segment
    unknown = routed_event("telegram", "nobody", TO_TEAM, telegram_headers(TO_TEAM, token=TEAM_SECRET))
    assert deliver(unknown) == (
        404,
        {"error": "route_not_found", "message": "no telegram route by that name"},
    )
    odd = routed_event("telegram", "Not_A-Route!", TO_TEAM, telegram_headers(TO_TEAM, token=TEAM_SECRET))
    assert deliver(odd)[0] == 404
    # Slack's route pinned to team T111: a delivery signed with its secret for team T999 is refused
    foreign = other_team(SLACK_MENTION)
    status, body = deliver(routed_event("slack", "work", foreign, slack_headers(foreign)))
    assert status == 403 and isinstance(body, dict) and body["error"] == "forbidden"
    # None of them queued anything; the unnamed route still delivers into the channel workspace
    assert queued(aws) == 0
    plain = fixture_bytes("telegram/update_message_text.json")
    assert deliver(api_event("telegram", plain, telegram_headers(plain)))[0] == 200
    [message] = clients.sqs(REGION).receive_message(QueueUrl=aws.queue_url)["Messages"]
    item: LaneItem = serde.loads(LaneItem, message["Body"])
    assert (item.inbound.workspace_id, "route" in item.inbound.reply_context) == ("default", False)


# ---------------------------------------------------------------- through the local gateway


@pytest.fixture
def gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LocalGateway, FakeOpenAI, FakePlatforms]]:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_CHANNEL_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAI() as model, FakePlatforms(extra_tokens=EXTRA_TOKENS) as platforms:
        settings = Settings(
            data_dir=tmp_path / "state",
            model="openai/fake-model",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
        )
        # `sigil dev` applies the file to its data dir at start
        gw = LocalGateway(settings, SIGIL_FILE)
        store = gw.backend.secrets
        assert isinstance(store, FileSecretStore)
        for name, value in {**SECRETS, **ROUTE_SECRETS}.items():
            store.set(name, value)
        gw.start()
        try:
            yield gw, model, platforms
        finally:
            gw.stop()


def wait_until(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_each_bot_delivers_into_its_workspace_and_is_answered_with_its_token_locally(
    gateway: tuple[LocalGateway, FakeOpenAI, FakePlatforms],
) -> None:
    gw, model, platforms = gateway
    client = TestClient(gw.app())
    # When each bot's platform delivers to its own webhook on the gateway (on the real clock)
    for platform, route, body, headers in deliveries(int(time.time())):
        answer = client.post(f"/webhooks/{platform}/{route}", content=body, headers=headers)
        assert (answer.status_code, answer.text) == (200, "")
    # Then, once the lane workers have run the turns, each was answered by its own bot ...
    assert wait_until(lambda: len(telegram_posts(platforms)) == 4 and len(slack_posts(platforms)) == 1)
    assert_replies(platforms)
    # ... and ran in its route's (or its chat's) workspace and session, with its chat's model
    assert wait_until(lambda: sum(len(gw.backend.audit.list_records(w)) for w in ("family", "team")) == 5)
    assert_landed(gw.backend, model)


def test_the_gateway_answers_a_routes_handshake_and_refuses_another_number(
    gateway: tuple[LocalGateway, FakeOpenAI, FakePlatforms],
) -> None:
    gw, _, _ = gateway
    client = TestClient(gw.app())
    # Meta's subscription handshake on the shop number's own webhook, with its own verify token
    query = {"hub.mode": "subscribe", "hub.verify_token": SHOP_VERIFY, "hub.challenge": "42"}
    assert client.get("/webhooks/whatsapp/shop", params=query).text == "42"
    unnamed_token = {**query, "hub.verify_token": SECRETS["whatsapp/verify-token"]}
    assert client.get("/webhooks/whatsapp/shop", params=unnamed_token).status_code == 401
    # A notification signed with the shop's app secret but for another business number: 403
    foreign = other_number(fixture_bytes("whatsapp/messages_text_notification.json"))
    refused = client.post("/webhooks/whatsapp/shop", content=foreign, headers=whatsapp_headers(foreign))
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
    # A Discord command for the helper's application is deferred; one for another application is 403
    now = int(time.time())
    command = json.loads(discord_command_variant())
    mine = compact(command | {"application_id": DISCORD_APPLICATION})
    deferred = client.post("/webhooks/discord/helper", content=mine, headers=discord_headers(mine, ts=now))
    assert (deferred.status_code, deferred.json()) == (200, {"type": 5})
    theirs = discord_command_variant()  # application 787053080478613500
    other_app = client.post(
        "/webhooks/discord/helper", content=theirs, headers=discord_headers(theirs, ts=now)
    )
    assert (other_app.status_code, other_app.json()["error"]) == (403, "forbidden")
    # An unknown route and an unknown platform are typed 404s
    missing = client.post("/webhooks/slack/nobody", content=SLACK_MENTION)
    assert (missing.status_code, missing.json()["error"]) == (404, "route_not_found")
    assert client.post("/webhooks/irc/family", content=b"{}").status_code == 404


# ---------------------------------------------------------------- the lookup itself


def lookup_of(routes: list[ChannelRoute]) -> Callable[[str, str], ChannelRoute | None]:
    table: dict[tuple[str, str], ChannelRoute] = {(r.platform, r.name): r for r in routes}
    return lambda platform, name: table.get((platform, name))


def test_an_unknown_route_is_refused_before_any_secret_is_read(backend: Backend) -> None:
    asked: list[tuple[str, str]] = []
    lookup = lookup_of(ROUTES)

    def counted(platform: str, name: str) -> ChannelRoute | None:
        asked.append((platform, name))
        return lookup(platform, name)

    secrets = DictSecrets(ROUTE_SECRETS)
    front = WebhookFront(
        Ingress(lanes=backend.lanes, outbox=backend.outbox, secrets=secrets, routes=counted), "default"
    )
    request = WebhookRequest("POST", "/webhooks/telegram/x", telegram_headers(TO_TEAM), TO_TEAM)
    # A well-formed name nobody declared is looked up once and refused; a malformed one, or a route
    # of another platform by that name, is not read at all
    for platform, name in (("telegram", "nobody"), ("telegram", "../team"), ("discord", "family")):
        with pytest.raises(NotFound):
            front.platform(platform, request, name)
    assert asked == [("telegram", "nobody"), ("discord", "family")]
    assert secrets.reads == []


def test_the_route_cache_keeps_an_answer_and_a_miss_for_its_ttl() -> None:
    reads: list[tuple[str, str]] = []
    lookup = lookup_of(ROUTES)
    now = [0.0]

    def counted(platform: str, name: str) -> ChannelRoute | None:
        reads.append((platform, name))
        return lookup(platform, name)

    cached = cached_routes(counted, ttl_s=60, clock=lambda: now[0])
    # Asked again within the minute: one read each, a found route and a miss alike
    assert [cached("telegram", "family"), cached("telegram", "family")] == [ROUTES[0], ROUTES[0]]
    assert [cached("slack", "nobody"), cached("slack", "nobody")] == [None, None]
    assert reads == [("telegram", "family"), ("slack", "nobody")]
    # After it, read again
    now[0] = 61.0
    assert cached("telegram", "family") == ROUTES[0]
    assert reads[-1] == ("telegram", "family") and len(reads) == 3


# ---------------------------------------------------------------- sigil secret


def test_sigil_secret_set_takes_a_routes_secret_names(tmp_path: Path) -> None:
    runner = CliRunner()
    data_dir = str(tmp_path / "state")

    def secret_set(name: str) -> int:
        result = runner.invoke(cli_app, ["secret", "set", name, "--data-dir", data_dir], input="v-" + name)
        return result.exit_code

    # A platform's key under a route's name is a known name ...
    for name in ("telegram/family/bot-token", "slack/work/signing-secret", "whatsapp/shop/verify-token"):
        assert secret_set(name) == 0, name
    # ... an unknown key, a name that can't be a route's, or a key of no platform is not
    for name in ("telegram/family/bot-tokn", "telegram/Fam!ly/bot-token", "llm/work/openai-api-key"):
        assert secret_set(name) == 2, name
    stored = FileSecretStore(Path(data_dir) / "secrets.json")
    assert stored.names() == sorted(
        ["telegram/family/bot-token", "slack/work/signing-secret", "whatsapp/shop/verify-token"]
    )
    assert stored.get("telegram/family/bot-token") == "v-telegram/family/bot-token"


def test_routes_are_lane_items_that_survive_serialisation() -> None:
    # The chat's model and the route's name travel on the lane (SQS body, the SQLite queue)
    from shared.channels.inbound import Accepted
    from shared.channels.routes import routed
    from shared.channels.telegram import TelegramChannel

    request = WebhookRequest("POST", "/", {}, FROM_GRANDMA)
    outcome = routed(ROUTES[0], TelegramChannel("family", ROUTES[0]).parse(request))
    assert isinstance(outcome, Accepted)
    [inbound] = outcome.messages
    item: LaneItem = serde.loads(LaneItem, serde.dumps(LaneItem(inbound=inbound)))
    assert (item.inbound.model, item.inbound.reply_context["route"]) == ("openai/fake-small", "family")
