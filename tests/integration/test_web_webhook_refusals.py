"""The web channel's refusals through the Lambda webhook on in-process moto: an unreadable
workspace secret, numbers too large to be genuine, characters a lane can't carry.

The webhook runs under a clock pinned at the sample's signing time, as in test_handlers.py. A
workspace outside the function's secret policy is stood in for by a botocore hook that answers
its GetSecretValue with the AccessDeniedException AWS would send.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from starlette.testclient import TestClient

from functions.webhook import handler as webhook
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.channels import web
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import LaneItem
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
SIGNED_AT = 1767225600  # events/README.md: webhook_web.json is signed at this time ...
SAMPLE_SECRET = "sample-web-secret-not-real"  # ... with this secret, for workspace "default"
WS = "default"
SEALED = "sealed"  # its secret exists, but the function may not read it
UNKNOWN = "nobody"  # no secret at all
BODY = json.dumps({"event_id": "evt-0100", "session": "demo", "user": "alice", "text": "hi"})


CONTEXT: Any = context_for("sigil-test")


@pytest.fixture
def pinned() -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("web-refusals")
        sm = clients.secretsmanager(REGION)
        sm.create_secret(Name=f"sigil/{web.secret_name(WS)}", SecretString=SAMPLE_SECRET)
        sm.create_secret(Name=f"sigil/{web.secret_name(SEALED)}", SecretString="sealed-secret")
        cloud.reset(config=resources.settings(secrets_prefix="sigil/"), clock=lambda: float(SIGNED_AT))
        yield resources
        cloud.reset()


@pytest.fixture
def secret_reads(pinned: AwsResources) -> list[str]:
    """Every GetSecretValue the webhook attempts, by secret id; the sealed one is denied, as IAM would."""
    reads: list[str] = []

    def deny_sealed(params: dict[str, Any], **_kwargs: Any) -> None:
        secret_id = json.loads(params["body"])["SecretId"]
        reads.append(secret_id)
        if secret_id == f"sigil/{web.secret_name(SEALED)}":
            error = {"Code": "AccessDeniedException", "Message": "not authorized to perform GetSecretValue"}
            raise ClientError({"Error": error}, "GetSecretValue")

    clients.secretsmanager(REGION).meta.events.register(
        "before-call.secrets-manager.GetSecretValue", deny_sealed
    )
    return reads


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def post(workspace: str, body: str, headers: dict[str, str]) -> dict[str, Any]:
    """The sample POST sent to `workspace` with `body` and these signing headers (none: unsigned)."""
    event = copy.deepcopy(load("webhook_web.json"))
    path = f"/webhooks/web/{workspace}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {"workspace": workspace}
    event["body"] = body
    del event["headers"]["x-sigil-timestamp"], event["headers"]["x-sigil-signature"]
    event["headers"].update({k.lower(): v for k, v in headers.items()})
    return event


def outbox_get(query: str, headers: dict[str, str]) -> dict[str, Any]:
    """The sample POST turned into a GET of the default workspace's demo outbox."""
    event = load("webhook_web.json")
    path = f"/sessions/{WS}/demo/outbox"
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET /sessions/{workspace}/{session}/outbox"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = "GET"
    event["rawQueryString"] = query
    if query:
        event["queryStringParameters"] = dict(part.split("=", 1) for part in query.split("&"))
    event["pathParameters"] = {"workspace": WS, "session": "demo"}
    del event["body"], event["headers"]["content-type"], event["headers"]["content-length"]
    del event["headers"]["x-sigil-timestamp"], event["headers"]["x-sigil-signature"]
    event["headers"].update({k.lower(): v for k, v in headers.items()})
    return event


def signed_target(query: str) -> dict[str, str]:
    target = f"/sessions/{WS}/demo/outbox" + (f"?{query}" if query else "")
    return web.signed_headers(SAMPLE_SECRET, target.encode(), now=SIGNED_AT)


def answer(response: dict[str, Any]) -> tuple[int, Any]:
    return response["statusCode"], json.loads(response["body"])


def queued(aws: AwsResources) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = (
        clients.sqs(REGION)
        .receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)
        .get("Messages", [])
    )
    return messages


MISMATCH = (401, {"error": "unauthorized", "message": "signature mismatch"})


# ---------------------------------------------------------------- an unreadable workspace secret


def test_an_unsigned_post_is_refused_before_any_secret_is_read(
    pinned: AwsResources, secret_reads: list[str]
) -> None:
    # Given a workspace whose secret the function may not read, and one that has none
    # When each gets an unsigned POST, and one with a signature that isn't v1=<64 hex digits>
    malformed = {"X-Sigil-Timestamp": str(SIGNED_AT), "X-Sigil-Signature": "v1=nothex"}
    answers = [
        answer(webhook.lambda_handler(post(ws, BODY, headers), CONTEXT))
        for ws in (SEALED, UNKNOWN)
        for headers in ({}, malformed)
    ]
    # Then every one is the same 401, whichever workspace it names, and no secret was read
    unsigned = (
        401,
        {"error": "unauthorized", "message": "missing X-Sigil-Timestamp or X-Sigil-Signature header"},
    )
    bad_shape = (401, {"error": "unauthorized", "message": "X-Sigil-Signature is not v1=<64 hex digits>"})
    assert answers == [unsigned, bad_shape, unsigned, bad_shape]
    assert secret_reads == []
    assert queued(pinned) == []


def test_a_denied_secret_answers_as_an_unknown_workspace_does(
    pinned: AwsResources, secret_reads: list[str]
) -> None:
    # Given a POST signed, freshly, with a secret that is not the workspace's
    headers = web.signed_headers("a-guess", BODY.encode(), now=SIGNED_AT)
    # When it is sent to the sealed workspace (AccessDenied) and to one with no secret (not found)
    sealed = answer(webhook.lambda_handler(post(SEALED, BODY, headers), CONTEXT))
    unknown = answer(webhook.lambda_handler(post(UNKNOWN, BODY, headers), CONTEXT))
    # Then both are the 401 of a wrong signature, not a 500 that would tell them apart
    assert sealed == unknown == MISMATCH
    assert queued(pinned) == []


def test_an_unreadable_secret_is_read_once_however_often_it_is_probed(
    pinned: AwsResources, secret_reads: list[str]
) -> None:
    # Given signed guesses at the sealed and the unknown workspace, each sent three times
    headers = web.signed_headers("a-guess", BODY.encode(), now=SIGNED_AT)
    for _ in range(3):
        for ws in (SEALED, UNKNOWN):
            assert answer(webhook.lambda_handler(post(ws, BODY, headers), CONTEXT)) == MISMATCH
    # Then the warm container asked Secrets Manager once for each
    assert sorted(secret_reads) == [f"sigil/web/{UNKNOWN}", f"sigil/web/{SEALED}"]


# ---------------------------------------------------------------- numbers


def test_a_400_digit_timestamp_is_a_401_on_every_route(pinned: AwsResources) -> None:
    # Given signing headers whose timestamp is 400 digits long
    headers = {"X-Sigil-Timestamp": "9" * 400, "X-Sigil-Signature": "v1=" + "0" * 64}
    refused = (401, {"error": "unauthorized", "message": "X-Sigil-Timestamp is not a unix timestamp"})
    # When a POST and an outbox GET carry them, then each is refused as not a timestamp
    assert answer(webhook.lambda_handler(post(WS, BODY, headers), CONTEXT)) == refused
    assert answer(webhook.lambda_handler(outbox_get("", headers), CONTEXT)) == refused


@pytest.mark.parametrize("after", ["9" * 20, str(2**63), "1" * 400, "-1", "+1", "1_0"])
def test_an_after_that_no_outbox_position_can_be_is_a_400(pinned: AwsResources, after: str) -> None:
    # Given a correctly signed outbox GET whose ?after= is not a 63-bit non-negative integer
    query = f"after={after}"
    # When the webhook handles it, then it answers 400 saying what 'after' may be
    assert answer(webhook.lambda_handler(outbox_get(query, signed_target(query)), CONTEXT)) == (
        400,
        {"error": "bad_request", "message": f"'after' must be an integer from 0 to {2**63 - 1}"},
    )


def test_the_largest_after_reads_an_empty_outbox(pinned: AwsResources) -> None:
    query = f"after={2**63 - 1}"
    assert answer(webhook.lambda_handler(outbox_get(query, signed_target(query)), CONTEXT)) == (
        200,
        {"replies": [], "next_after": None},
    )


# ---------------------------------------------------------------- characters


def test_characters_sqs_refuses_never_reach_the_lane(pinned: AwsResources) -> None:
    # Given a signed POST whose text and user name hold U+FFFE, U+FFFF and U+0000
    body = json.dumps(
        {
            "event_id": "evt-0200",
            "session": "demo",
            "user": "alice",
            "text": "a\ufffeb\uffffc\x00d",
            "user_name": "Al\x00i\ufffee\uffff",
        }
    )
    headers = web.signed_headers(SAMPLE_SECRET, body.encode(), now=SIGNED_AT)
    # When the webhook handles it
    assert answer(webhook.lambda_handler(post(WS, body, headers), CONTEXT))[0] == 202
    # Then the lane item carries them as U+FFFD, in the message body as SQS stored it
    [message] = queued(pinned)
    item = serde.loads(LaneItem, message["Body"])
    assert item.inbound.text == "a\ufffdb\ufffdc\ufffdd"
    assert item.inbound.sender.name == "Al\ufffdi\ufffde\ufffd"
    assert not {"\ufffe", "\uffff", "\x00"} & set(message["Body"])


# ---------------------------------------------------------------- the local gateway's numbers


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    """`sigil dev`'s gateway (not started: nothing consumes its lanes) and the default workspace's secret."""
    gw = LocalGateway(Settings(data_dir=tmp_path / "sigil"))
    try:
        yield TestClient(gw.app()), gw.ensure_workspace(WS)
    finally:
        gw.backend.close()


def test_the_local_gateway_refuses_a_400_digit_timestamp_on_every_route(
    gateway: tuple[TestClient, str],
) -> None:
    client, _secret = gateway
    headers = {"X-Sigil-Timestamp": "9" * 400, "X-Sigil-Signature": "v1=" + "0" * 64}
    refused = {"error": "unauthorized", "message": "X-Sigil-Timestamp is not a unix timestamp"}
    for answered in (
        client.post(f"/webhooks/web/{WS}", content=BODY.encode(), headers=headers),
        client.get(f"/sessions/{WS}/demo/outbox", headers=headers),
        client.get(f"/sessions/{WS}/demo/stream", headers=headers),
    ):
        assert (answered.status_code, answered.json()) == (401, refused)


@pytest.mark.parametrize("route", ["outbox", "stream"])
@pytest.mark.parametrize("after", ["9" * 20, str(2**63), "-1"])
def test_the_local_gateway_refuses_an_after_beyond_63_bits(
    gateway: tuple[TestClient, str], route: str, after: str
) -> None:
    # Given a correctly signed GET whose ?after= is no outbox position
    client, secret = gateway
    target = f"/sessions/{WS}/demo/{route}?after={after}"
    headers = web.signed_headers(secret, target.encode())
    # When the gateway handles it, then it answers 400 before reading (or streaming) anything
    answered = client.get(target, headers=headers)
    assert (answered.status_code, answered.json()) == (
        400,
        {"error": "bad_request", "message": f"'after' must be an integer from 0 to {2**63 - 1}"},
    )


def test_the_local_gateway_refuses_a_last_event_id_beyond_63_bits(gateway: tuple[TestClient, str]) -> None:
    client, secret = gateway
    target = f"/sessions/{WS}/demo/stream"
    headers = {**web.signed_headers(secret, target.encode()), "Last-Event-ID": "9" * 20}
    answered = client.get(target, headers=headers)
    assert answered.status_code == 400
    assert answered.json()["error"] == "bad_request"
