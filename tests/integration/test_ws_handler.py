"""The WebSocket API's function (functions/ws) and the agent's frames, on in-process moto.

The events are the samples in events/ws_*.json (API Gateway WebSocket events: requestContext's
routeKey, eventType and connectionId); the token in ws_connect.json is minted with the sample web
secret at 1767225600 for user alice, sessions "demo" and "alice.*", for an hour. Frames posted
through the management API are read back from moto's apigatewaymanagementapi backend (which
concatenates a connection's posts); a gone connection needs an answer moto never gives (410), so
that test posts to the `sigil dev --aws` stand-in of the management API instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from moto import mock_aws
from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
from moto.core import DEFAULT_ACCOUNT_ID

from functions.agent import handler as agent
from functions.ws import handler as ws
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb import DynamoConnections, DynamoIdentityStore, DynamoWorkspaceStore
from shared.adapters.aws.dynamodb.connections import listeners_pk
from shared.channels import web, web_tokens
from shared.channels.web_socket import DELTA_INTERVAL_S, SessionSockets
from shared.identity import derived_user_id
from shared.local.aws_mode.event_source import sqs_event
from shared.local.aws_mode.management_api import ManagementApi
from shared.models import BudgetLimits, Identity, LaneItem, OutboundMessage, ScopeLimits, new_workspace
from tests.support.fake_openai import FakeOpenAI
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
SIGNED_AT = 1767225600
SAMPLE_SECRET = "sample-web-secret-not-real"
WS = "default"
CONNECTION = "L0SM9cOFvHcCIhw="  # the samples' connectionId
ENDPOINT = "https://abc123def4.execute-api.us-east-1.amazonaws.com/prod"
CONTEXT: Any = context_for("sigil-ws")


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def frame_event(frame: dict[str, Any], connection: str = CONNECTION) -> dict[str, Any]:
    event = load("ws_send.json")
    event["body"] = json.dumps(frame)
    event["requestContext"]["connectionId"] = connection
    return event


def connect_event(token: str | None, connection: str = CONNECTION) -> dict[str, Any]:
    event = load("ws_connect.json")
    event["requestContext"]["connectionId"] = connection
    if token is None:
        del event["queryStringParameters"], event["multiValueQueryStringParameters"]
    else:
        event["queryStringParameters"] = {"token": token}
        event["multiValueQueryStringParameters"] = {"token": [token]}
    return event


def token(
    user: str = "alice", sessions: list[str] | None = None, *, secret: str = SAMPLE_SECRET, ws: str = WS
) -> str:
    claims = web_tokens.claims_for(ws, user, sessions or ["demo"], now=SIGNED_AT, ttl_s=3600)
    return web_tokens.mint(secret, claims)


def posted(connection: str = CONNECTION) -> list[dict[str, Any]]:
    """The frames posted to `connection`, in order (moto keeps them as one byte string)."""
    backend = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID][REGION]
    key = quote(connection, safe="")  # moto keys a connection by its id as the URL path carries it
    data = backend.connections[key].data.decode() if key in backend.connections else ""
    frames, decoder, at = [], json.JSONDecoder(), 0
    while at < len(data):
        frame, at = decoder.raw_decode(data, at)
        frames.append(frame)
    return frames


def queued(aws: AwsResources) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = (
        clients.sqs(REGION)
        .receive_message(
            QueueUrl=aws.queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        )
        .get("Messages", [])
    )
    return messages


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("ws")
        clients.secretsmanager(REGION).create_secret(
            Name=f"sigil/{web.secret_name(WS)}", SecretString=SAMPLE_SECRET
        )
        yield resources
        cloud.reset()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def at(aws: AwsResources, when: float = SIGNED_AT + 60, endpoint: str = ENDPOINT, **overrides: Any) -> None:
    """The ws function's (and agent's) runtime: moto, the WebSocket endpoint, a pinned clock."""
    config = aws.settings(secrets_prefix="sigil/", ws_endpoint=endpoint, **overrides)
    cloud.reset(config=config, clock=lambda: float(when))


def handle(event: dict[str, Any]) -> int:
    status: int = ws.lambda_handler(event, CONTEXT)["statusCode"]
    return status


def connections() -> DynamoConnections:
    return cloud.sockets().connections  # type: ignore[return-value]


# ---------------------------------------------------------------- $connect / $disconnect


def test_a_good_token_connects_and_the_connection_carries_the_tokens_user_and_sessions(
    aws: AwsResources,
) -> None:
    at(aws)
    assert handle(load("ws_connect.json")) == 200
    record = connections().get(CONNECTION)
    assert record is not None
    assert (record.workspace_id, record.user, record.sessions) == (WS, "alice", ["demo", "alice.*"])
    assert record.expires_at == SIGNED_AT + 3600


@pytest.mark.parametrize(
    ("presented", "why"),
    [
        (token(secret="another-secret"), "forged: signed with another secret"),
        (token(ws="elsewhere"), "a workspace with no web secret"),
        (token()[:-4] + "AAAA", "tampered signature"),
        ("not-a-token", "malformed"),
    ],
)
def test_a_bad_token_is_refused_and_nothing_is_recorded(
    aws: AwsResources, presented: str | None, why: str
) -> None:
    at(aws)
    assert handle(connect_event(presented)) == 401, why
    assert connections().get(CONNECTION) is None


def test_an_expired_token_is_refused(aws: AwsResources) -> None:
    at(aws, when=SIGNED_AT + 3600)  # the sample token's exp
    assert handle(load("ws_connect.json")) == 401
    assert connections().get(CONNECTION) is None


def test_disconnect_forgets_the_connection_and_what_it_listened_to(aws: AwsResources) -> None:
    at(aws)
    handle(load("ws_connect.json"))
    handle(load("ws_resume.json"))
    assert connections().listeners(WS, "demo", now=SIGNED_AT) == [CONNECTION]
    assert handle(load("ws_disconnect.json")) == 200
    assert connections().get(CONNECTION) is None
    assert connections().listeners(WS, "demo", now=SIGNED_AT) == []
    # And no item of the connection is left in the table
    items = clients.dynamodb(REGION).scan(TableName=aws.sessions_table)["Items"]
    assert not [i for i in items if CONNECTION in json.dumps(i)]


# ---------------------------------------------------------------- send


def test_send_queues_the_message_as_the_tokens_user_on_the_web_lane(aws: AwsResources) -> None:
    at(aws)
    handle(load("ws_connect.json"))
    assert handle(load("ws_send.json")) == 200
    [message] = queued(aws)
    item = serde.loads(LaneItem, message["Body"])
    assert item.inbound.sender.id == "alice"
    assert (item.inbound.channel, item.inbound.session_id, item.inbound.text) == (
        "web",
        "web.demo",
        "What's on my calendar tomorrow?",
    )
    # The same lane and dedup id as POST /webhooks/web gives the same message
    assert message["Attributes"]["MessageGroupId"] == "default.web.demo"
    assert message["Attributes"]["MessageDeduplicationId"] == "default.web.evt-ws-0001"
    assert posted() == [
        {"type": "accepted", "event_id": "evt-ws-0001", "session": "demo", "status": "queued"}
    ]


def test_a_frame_claiming_another_user_is_refused_and_nothing_is_queued(aws: AwsResources) -> None:
    at(aws)
    handle(load("ws_connect.json"))
    frame = {"type": "send", "event_id": "evt-x", "session": "demo", "text": "hi", "user": "mallory"}
    assert handle(frame_event(frame)) == 200
    assert queued(aws) == []
    [error] = posted()
    assert (error["type"], error["code"], error["event_id"]) == ("error", "bad_request", "evt-x")
    assert "mallory" not in json.dumps(error)


def test_send_to_a_session_the_token_does_not_cover_is_refused(aws: AwsResources) -> None:
    at(aws)
    handle(load("ws_connect.json"))
    for session in ("kitchen", "bob.notes", "alice."):
        handle(frame_event({"type": "send", "event_id": f"evt-{session}", "session": session, "text": "hi"}))
    assert queued(aws) == []
    assert [f["code"] for f in posted()] == ["session_forbidden"] * 3
    # While a session the token's "alice.*" covers is accepted
    handle(frame_event({"type": "send", "event_id": "evt-ok", "session": "alice.notes", "text": "hi"}))
    assert posted()[-1]["type"] == "accepted"


@dataclass
class Browsers:
    """The management API's stand-in (410 for a connection that is not open; a DELETE closes one,
    where moto forgets what was posted) and the frames each open connection got."""

    management: ManagementApi
    received: dict[str, list[dict[str, Any]]]

    def open(self, connection: str) -> None:
        frames = self.received.setdefault(connection, [])
        self.management.open(connection, lambda data: frames.append(json.loads(data)))

    def is_open(self, connection: str) -> bool:
        return self.management.deliver(connection, b"{}")


@pytest.fixture
def browsers() -> Iterator[Browsers]:
    with ManagementApi(stage="prod") as management:
        yield Browsers(management, {})


def test_a_frame_after_the_token_expired_is_refused_and_the_connection_closed(
    aws: AwsResources, browsers: Browsers
) -> None:
    browsers.open(CONNECTION)
    received = browsers.received
    at(aws, endpoint=browsers.management.endpoint)
    handle(load("ws_connect.json"))
    at(aws, when=SIGNED_AT + 3600, endpoint=browsers.management.endpoint)
    handle(load("ws_send.json"))
    assert queued(aws) == []
    assert [(f["type"], f["code"]) for f in received[CONNECTION]] == [("error", "token_expired")]
    # As the local gateway closes with 4401: the server hangs up, and forgets the connection
    assert not browsers.is_open(CONNECTION)
    assert connections().get(CONNECTION) is None


def test_a_frame_on_an_unauthenticated_connection_is_refused(aws: AwsResources, browsers: Browsers) -> None:
    browsers.open(CONNECTION)
    received = browsers.received
    at(aws, endpoint=browsers.management.endpoint)
    assert handle(connect_event(None)) == 200  # admitted, to authenticate with an `auth` frame
    handle(load("ws_send.json"))
    assert queued(aws) == []
    assert [f["code"] for f in received[CONNECTION]] == ["token_invalid"]
    assert not browsers.is_open(CONNECTION)


def test_an_auth_frame_authenticates_a_connection_opened_without_a_token(
    aws: AwsResources, browsers: Browsers
) -> None:
    # The page's way: no token in the URL (it would reach access logs), then {"type": "auth"}
    browsers.open(CONNECTION)
    received = browsers.received
    at(aws, endpoint=browsers.management.endpoint)
    assert handle(connect_event(None)) == 200
    handle(frame_event({"type": "auth", "token": token(sessions=["demo", "alice.*"])}))
    [ready] = received[CONNECTION]
    assert ready == {
        "type": "ready",
        "workspace": WS,
        "user": "alice",
        "sessions": ["demo", "alice.*"],
        "exp": SIGNED_AT + 3600,
    }
    handle(load("ws_send.json"))
    assert received[CONNECTION][-1]["type"] == "accepted"
    assert serde.loads(LaneItem, queued(aws)[0]["Body"]).inbound.sender.id == "alice"


def test_an_auth_frame_with_a_forged_token_is_refused_and_the_connection_closed(
    aws: AwsResources, browsers: Browsers
) -> None:
    browsers.open(CONNECTION)
    received = browsers.received
    at(aws, endpoint=browsers.management.endpoint)
    handle(connect_event(None))
    handle(frame_event({"type": "auth", "token": token(secret="another-secret")}))
    assert [f["code"] for f in received[CONNECTION]] == ["token_invalid"]
    assert not browsers.is_open(CONNECTION)
    assert connections().get(CONNECTION) is None


@pytest.mark.parametrize(
    "body",
    ["{not json", '{"type": "shout"}', '{"type": "resume", "session": "demo", "after": -1}'],
)
def test_a_malformed_frame_is_a_bad_request(aws: AwsResources, body: str) -> None:
    at(aws)
    handle(load("ws_connect.json"))
    event = load("ws_send.json")
    event["body"] = body
    handle(event)
    assert [f["code"] for f in posted()] == ["bad_request"]


# ---------------------------------------------------------------- resume and the turn's frames


def reply(seq: int, text: str, turn: str, session: str = "demo") -> OutboundMessage:
    return OutboundMessage(
        workspace_id=WS,
        session_id=web.session_id_for(session),
        channel="web",
        chat_id=session,
        turn_id=turn,
        seq=seq,
        text=text,
    )


def test_resume_replays_the_outbox_after_the_seq_in_order(aws: AwsResources) -> None:
    at(aws)
    outbox = cloud.ingress().outbox
    for seq, text in ((1, "one"), (101, "two"), (201, "three")):
        outbox.append(reply(seq, text, f"t{seq}"))
    handle(load("ws_connect.json"))
    handle(frame_event({"type": "resume", "session": "demo", "after": 1}))
    frames = posted()
    assert [(f["type"], f["seq"], f["text"]) for f in frames] == [
        ("reply", 101, "two"),
        ("reply", 201, "three"),
    ]
    assert {f["session"] for f in frames} == {"demo"}
    # And another session's outbox is never replayed to it
    handle(frame_event({"type": "resume", "session": "kitchen", "after": 0}))
    assert posted()[-1]["code"] == "session_forbidden"


def test_a_users_own_sessions_never_cover_another_users_whose_id_extends_it(aws: AwsResources) -> None:
    # User ids may hold dots: `john`'s own sessions (`john.*`, what `sigil web token --user john`
    # grants) must not reach user `john.smith`'s `john.smith.main`, to read or to post.
    at(aws)
    cloud.ingress().outbox.append(reply(1, "john.smith's reply", "t1", session="john.smith.main"))
    handle(connect_event(token("john", ["john.*"])))
    handle(frame_event({"type": "resume", "session": "john.smith.main", "after": 0}))
    send = {"type": "send", "event_id": "evt-j", "session": "john.smith.main", "text": "let me in"}
    handle(frame_event(send))
    assert [(f["type"], f.get("code")) for f in posted()] == [("error", "session_forbidden")] * 2
    assert queued(aws) == [] and connections().listeners(WS, "john.smith.main", now=SIGNED_AT) == []
    # While john's own conversation is his, and john.smith's token reaches john.smith's.
    handle(frame_event(send | {"session": "john.main"}))
    assert posted()[-1]["type"] == "accepted"
    other = "Other000000002="
    handle(connect_event(token("john.smith", ["john.smith.*"]), connection=other))
    handle(frame_event({"type": "resume", "session": "john.smith.main", "after": 0}, connection=other))
    assert [f["text"] for f in posted(other)] == ["john.smith's reply"]


def run_queued_turns(aws: AwsResources) -> dict[str, Any]:
    queue_arn = clients.sqs(REGION).get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    event = sqs_event(queued(aws), queue_arn=queue_arn, region=REGION)
    response: dict[str, Any] = agent.lambda_handler(event, context_for("sigil-agent"))
    return response


def test_a_turns_deltas_and_final_reply_reach_the_connection(aws: AwsResources, fake: FakeOpenAI) -> None:
    # Given a connected browser that sent a message, and a model that streams a long answer
    answer = " ".join(f"word{i}" for i in range(150)) + "."
    # (paced, so the stream outlasts a few of the agent's delta intervals)
    fake.pace(0.01, answer)
    at(aws, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test")
    handle(load("ws_connect.json"))
    handle(load("ws_send.json"))
    # When the agent runs the queued turn
    assert run_queued_turns(aws) == {"batchItemFailures": []}
    # Then the browser got: accepted, the deltas as the model streamed, then the reply
    frames = posted()
    assert frames[0]["type"] == "accepted"
    deltas = [f for f in frames if f["type"] == "delta"]
    replies = [f for f in frames if f["type"] == "reply"]
    assert len(deltas) >= 2, "the reply was not streamed"
    assert frames[-1] == replies[-1] and len(replies) == 1
    # The deltas rebuild a prefix of the reply, and the reply is the outbox's entry
    shown = ""
    for delta in deltas:
        shown = shown[: delta["offset"]] + delta["text"]
        assert delta["session"] == "demo" and delta["turn_id"] == replies[0]["turn_id"]
    assert answer.startswith(shown) and shown
    [entry] = cloud.turn_deps().backend.outbox.read(WS, "web.demo")
    assert (replies[0]["seq"], replies[0]["text"], replies[0]["in_reply_to"]) == (
        entry.seq,
        entry.message.text,
        "evt-ws-0001",
    )
    assert entry.message.text == answer


def sockets_at(monotonic: Callable[[], float]) -> SessionSockets:
    """The agent's SessionSockets on the ws function's connections, at the pinned clock, with the
    delta interval's clock the test's."""
    cloud_sockets = cloud.sockets()
    clock = lambda: float(SIGNED_AT + 60)  # noqa: E731
    return SessionSockets(cloud_sockets.connections, cloud_sockets.poster, clock=clock, monotonic=monotonic)


def streamed(reply: str, step: int = 64) -> list[web.WebDelta]:
    """A part's deltas as shared.channels.web.StreamedDeltas makes them: `step` characters more
    each time (the redactor's release), then the final one."""
    base = {"workspace_id": WS, "session_id": "web.demo", "session": "demo", "turn_id": "t-1"}
    grown = [web.WebDelta(**base, offset=at, text=reply[at : at + step]) for at in range(0, len(reply), step)]
    return [*grown, web.WebDelta(**base, final=True)]


def shown(frames: list[dict[str, Any]]) -> str:
    """The page's streamed text after these delta frames (app.js onDelta)."""
    text = ""
    for frame in frames:
        assert frame["offset"] <= len(text), "an increment past what the page has"
        text = text[: frame["offset"]] + frame["text"]
    return text


def test_a_streamed_reply_posts_increments_coalesced_in_time(aws: AwsResources) -> None:
    # Given a connection listening to "demo", and a part of 20 KB streamed 64 characters at a time,
    # one delta every 50 ms of a clock the test turns
    at(aws)
    handle(load("ws_connect.json"))
    handle(frame_event({"type": "resume", "session": "demo", "after": 0}))
    reply = "".join(f"line {i:05d} of a long streamed answer.\n" for i in range(512))[:20_000]
    now = [0.0]
    sockets = sockets_at(lambda: now[0])
    deltas = streamed(reply)
    # When the deltas are published, a second page joining half way
    for index, delta in enumerate(deltas):
        if index == len(deltas) // 2:
            handle(connect_event(token(), connection="Late000000001="))
            handle(
                frame_event({"type": "resume", "session": "demo", "after": 0}, connection="Late000000001=")
            )
        sockets.publish(delta)
        now[0] += 0.05
    # Then at most one post per DELTA_INTERVAL_S went to each page, each an increment from what that
    # page had: the first page's posts add up to the text once, a prefix of the reply
    first = [f for f in posted() if f["type"] == "delta"]
    assert 2 <= len(first) <= len(deltas) * 0.05 / DELTA_INTERVAL_S + 1
    assert reply.startswith(shown(first)) and len(shown(first)) > len(reply) * 0.9
    assert sum(len(f["text"]) for f in first) == len(shown(first))
    # And the page that joined got the whole text so far first, then increments
    late = [f for f in posted("Late000000001=") if f["type"] == "delta"]
    assert late[0]["offset"] == 0 and len(late[0]["text"]) >= len(reply) // 2 - 64
    assert reply.startswith(shown(late)) and len(late) >= 2


def test_a_part_that_starts_over_is_posted_whole_again(aws: AwsResources) -> None:
    # Given a listening page that has part of a text (the loop's model call streamed it)
    at(aws)
    handle(load("ws_connect.json"))
    handle(frame_event({"type": "resume", "session": "demo", "after": 0}))
    now = [0.0]
    sockets = sockets_at(lambda: now[0])
    first, *_ = streamed("Let me look that up for you.")
    sockets.publish(first)
    # When the next model call's text replaces it from offset 0
    now[0] += 1
    sockets.publish(first.model_copy(update={"offset": 0, "text": "It is sunny"}))
    # Then the page gets the new text whole, not as an increment of the old one
    frames = [f for f in posted() if f["type"] == "delta"]
    assert [(f["offset"], f["text"]) for f in frames] == [
        (0, "Let me look that up for you."),
        (0, "It is sunny"),
    ]


def test_a_secret_in_the_reply_never_reaches_the_socket_unredacted(
    aws: AwsResources, fake: FakeOpenAI
) -> None:
    key = "sk-proj-Q7fJk2LmN9pR4sT6vW8xY1zA3bC5dE7g"
    fake.respond(" ".join(["Here", "it", "is:", key, *[f"filler{i}" for i in range(80)]]))
    at(aws, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test")
    handle(load("ws_connect.json"))
    handle(load("ws_send.json"))
    assert run_queued_turns(aws) == {"batchItemFailures": []}
    frames = posted()
    assert [f for f in frames if f["type"] == "delta"], "nothing streamed"
    assert key[8:] not in json.dumps(frames)
    assert "[REDACTED" in frames[-1]["text"]


def test_a_post_that_fails_loses_nothing_the_outbox_has_the_reply_for_resume(
    aws: AwsResources, fake: FakeOpenAI
) -> None:
    # Given a listener whose socket went away without a $disconnect (the stand-in answers 410)
    fake.respond("All done.")
    with ManagementApi(stage="prod") as management:
        at(
            aws,
            endpoint=management.endpoint,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
        )
        received: list[bytes] = []
        management.open(CONNECTION, received.append)
        handle(load("ws_connect.json"))
        handle(load("ws_send.json"))
        assert json.loads(received[0])["type"] == "accepted"
        management.close(CONNECTION)  # the browser is gone
        # When the turn runs and posts to it
        assert run_queued_turns(aws) == {"batchItemFailures": []}
        # Then the gone connection was forgotten, listener and all
        assert connections().get(CONNECTION) is None
        assert connections().listeners(WS, "demo", now=SIGNED_AT) == []
        items = clients.dynamodb(REGION).scan(TableName=aws.sessions_table)["Items"]
        assert not [i for i in items if i["pk"]["S"] == listeners_pk(WS, "demo")]
        # And a new connection resuming from what it had gets the reply from the outbox
        management.open("NewConn0000001=", received.append)
        handle(connect_event(token(), connection="NewConn0000001="))
        handle(frame_event({"type": "resume", "session": "demo", "after": 0}, connection="NewConn0000001="))
        last = json.loads(received[-1])
        assert (last["type"], last["text"]) == ("reply", "All done.")


def test_frames_go_only_to_the_sessions_listeners(aws: AwsResources, fake: FakeOpenAI) -> None:
    # Given two browsers of alice: one on "demo", one on "alice.notes"
    fake.respond("For demo only.")
    at(aws, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test")
    other = "Other000000001="
    handle(load("ws_connect.json"))
    handle(connect_event(token(sessions=["alice.*"]), connection=other))
    handle(frame_event({"type": "resume", "session": "alice.notes", "after": 0}, connection=other))
    handle(load("ws_send.json"))
    # When demo's turn runs, then only demo's connection gets its frames
    assert run_queued_turns(aws) == {"batchItemFailures": []}
    assert posted()[-1]["text"] == "For demo only."
    assert posted(other) == []


def test_the_sample_events_reach_the_handler(aws: AwsResources) -> None:
    # The committed samples, in a connection's order, each answered 200
    at(aws)
    for name in ("ws_connect.json", "ws_resume.json", "ws_send.json", "ws_disconnect.json"):
        assert handle(copy.deepcopy(load(name))) == 200, name
    assert [f["type"] for f in posted()] == ["accepted"]


# ---------------------------------------------------------------- refused before queueing


def workspace_stores(aws: AwsResources) -> tuple[DynamoWorkspaceStore, DynamoIdentityStore]:
    client = clients.dynamodb(REGION)
    return (
        DynamoWorkspaceStore(aws.memory_table, client=client),
        DynamoIdentityStore(aws.memory_table, client=client),
    )


@pytest.mark.parametrize("why", ["blocked", "not on the allow list"])
def test_a_refused_sender_is_told_before_anything_is_queued(aws: AwsResources, why: str) -> None:
    workspaces, identities = workspace_stores(aws)
    if why == "blocked":
        now = datetime.now(UTC)
        identities.put(
            Identity(
                workspace_id=WS,
                channel="web",
                channel_user_id="alice",
                user_id=derived_user_id("web", "alice"),
                status="blocked",
                created_at=now,
            )
        )
    else:
        workspaces.put(new_workspace(WS).model_copy(update={"unknown_sender_policy": "allow_list"}))
    at(aws)
    handle(load("ws_connect.json"))
    handle(load("ws_send.json"))
    assert queued(aws) == []
    [error] = posted()
    assert (error["code"], error["event_id"], error["session"]) == ("sender_refused", "evt-ws-0001", "demo")


def test_an_exhausted_budget_is_told_before_anything_is_queued(aws: AwsResources) -> None:
    workspaces, _ = workspace_stores(aws)
    # A limit of 0 denies every call (shared.models.ScopeLimits)
    limits = BudgetLimits(user=ScopeLimits(tokens_per_day=0))
    workspaces.put(new_workspace(WS).model_copy(update={"budget": limits}))
    at(aws)
    handle(load("ws_connect.json"))
    handle(load("ws_send.json"))
    assert queued(aws) == []
    [error] = posted()
    assert (error["type"], error["code"], error["event_id"]) == ("error", "budget_exhausted", "evt-ws-0001")
    assert error["message"]


def test_a_page_on_another_origin_is_refused_when_the_stack_names_the_pages(aws: AwsResources) -> None:
    config = aws.settings(
        secrets_prefix="sigil/", ws_endpoint=ENDPOINT, web_origins=["https://chat.example.com"]
    )
    cloud.reset(config=config, clock=lambda: float(SIGNED_AT + 60))
    # The sample's Origin is the page's: admitted
    assert handle(load("ws_connect.json")) == 200
    # Another site's page, with the same good token: refused, nothing recorded
    event = connect_event(token(), connection="Elsewhere00001=")
    event["headers"]["Origin"] = event["multiValueHeaders"]["Origin"][0] = "https://evil.example"
    assert handle(event) == 403
    assert connections().get("Elsewhere00001=") is None


def test_a_token_of_another_workspace_reaches_that_workspace_only(aws: AwsResources) -> None:
    # Given a reply in default's session "demo", and a second workspace with its own web secret
    clients.secretsmanager(REGION).create_secret(
        Name=f"sigil/{web.secret_name('other')}", SecretString="other-secret"
    )
    at(aws)
    cloud.ingress().outbox.append(reply(1, "default's reply", "t1"))
    # When a browser holding other's token for a session also named "demo" connects and resumes
    handle(connect_event(token(secret="other-secret", ws="other")))
    handle(frame_event({"type": "resume", "session": "demo", "after": 0}))
    handle(frame_event({"type": "send", "event_id": "evt-other", "session": "demo", "text": "hi"}))
    # Then it reads nothing of default's, and its message is queued in other's lane
    assert [f["type"] for f in posted()] == ["accepted"]
    [message] = queued(aws)
    assert message["Attributes"]["MessageGroupId"] == "other.web.demo"
    # And default's listeners never include it
    assert connections().listeners(WS, "demo", now=SIGNED_AT) == []
