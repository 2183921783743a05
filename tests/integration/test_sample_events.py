"""Every sample in events/ through its real handler on in-process moto (events/README.md).

Each file is handed to the handler its shape names: an HTTP API event to the webhook, an SQS
batch to the agent (the extraction queue's to the consolidate function), an EventBridge event to
the consolidate function, CloudFormation's stack-status event to the sandbox precompile function;
a new sample is picked up here by its shape, and one of no known shape fails. The webhook samples
are checked twice: as committed, under a clock pinned at their signing time, and signed again now
by `sigil events sign` under the real clock, which is how a user feeds them to `sam local
invoke`. The secrets stored are the samples' own (shared.cli.events.sample_secrets). The agent's
model is the real openai SDK against the local OpenAI stand-in; OpenSearch is osmem-server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from osmem_server import OsmemServer
from typer.testing import CliRunner

from functions.agent import handler as agent
from functions.consolidate import handler as consolidate
from functions.sandbox import handler as sandbox
from functions.webhook import handler as webhook
from functions.ws import handler as ws
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.sandbox_cache import S3CompiledCache
from shared.cli import app
from shared.cli.events import SIGNED_AT, sample_secrets, sign_event
from shared.config import Settings
from shared.sandbox.compiled import cache_key
from shared.sandbox.wasm import RUNTIME_SHA256
from tests.support.fake_openai import FakeOpenAI
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
SAMPLES = sorted(p.name for p in EVENTS.glob("*.json"))
# What each webhook sample is answered when it is accepted: status, and a part of the body.
ACCEPTED: dict[str, tuple[int, str]] = {
    "POST /webhooks/web/{workspace}": (202, '"status":"queued"'),
    "GET /sessions/{workspace}/{session}/outbox": (200, '"replies":[]'),
    "POST /webhooks/telegram": (200, ""),
    "POST /webhooks/slack": (200, ""),
    "POST /webhooks/discord": (200, '{"type":5}'),  # a deferred answer: the reply comes as a follow-up
    "POST /webhooks/whatsapp": (200, ""),
    "GET /webhooks/whatsapp": (200, "1158201444"),  # the handshake's challenge, echoed
}
QUEUES = {  # the routes that put a message on a lane, and how many
    "POST /webhooks/web/{workspace}": 1,
    "POST /webhooks/telegram": 1,
    "POST /webhooks/slack": 1,
    "POST /webhooks/discord": 1,
    "POST /webhooks/whatsapp": 1,
}

# The samples' WebSocket API stage (events/ws_*.json: requestContext.domainName and stage).
WS_ENDPOINT = "https://abc123def4.execute-api.us-east-1.amazonaws.com/prod"

runner = CliRunner()


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


@pytest.fixture(scope="module")
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def aws(osmem: OsmemServer, fake: FakeOpenAI) -> Iterator[Settings]:
    with mock_aws():
        clients.reset()
        resources: AwsResources = provision("samples")
        for name, value in sample_secrets().items():
            clients.secretsmanager(REGION).create_secret(Name=f"sigil/{name}", SecretString=value)
        yield resources.settings(
            secrets_prefix="sigil/",
            opensearch_endpoint=osmem.url,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
        )
        cloud.reset()


def queued(settings: Settings) -> int:
    attrs = clients.sqs(REGION).get_queue_attributes(
        QueueUrl=settings.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


def through_webhook(settings: Settings, event: dict[str, Any], clock: Callable[[], float]) -> tuple[int, str]:
    cloud.reset(config=settings, clock=clock)
    response = webhook.lambda_handler(event, context_for("sigil-webhook"))
    return response["statusCode"], response["body"]


@pytest.mark.parametrize("name", SAMPLES)
def test_each_sample_is_accepted_by_its_handler(name: str, aws: Settings) -> None:
    event = load(name)
    if "routeKey" in event:
        route = event["routeKey"]
        status, expected = ACCEPTED[route]
        # As committed, under the clock it was signed at
        answered = through_webhook(aws, event, lambda: float(SIGNED_AT))
        assert answered[0] == status and expected in answered[1], answered
        # And signed again now, under the real clock (a second delivery: queued again or dropped
        # as a duplicate by the FIFO queue, answered the same)
        answered = through_webhook(aws, sign_event(event, now=time.time()), time.time)
        assert answered[0] == status and expected in answered[1], answered
        assert queued(aws) == QUEUES.get(route, 0)
    elif "Records" in event and event["Records"][0]["eventSourceARN"].endswith("-extraction"):
        # The extraction queue's TurnCommitted (per-turn extraction): a session the sample never
        # had is nothing to extract, and nothing fails
        cloud.reset(config=aws)
        result = consolidate.lambda_handler(event, context_for("sigil-consolidate"))
        assert result["batchItemFailures"] == [], result
        assert [r["status"] for r in result["extractions"]] == ["nothing"], result
    elif "Records" in event:
        cloud.reset(config=aws)
        assert agent.lambda_handler(event, context_for("sigil-agent")) == {"batchItemFailures": []}
        # Every record's turn answered its user: the web samples' replies are in the outbox
        outbox = cloud.turn_deps().backend.outbox
        sessions = {json.loads(r["body"])["inbound"]["session_id"] for r in event["Records"]}
        assert all(outbox.read("default", s) for s in sessions)
    elif event.get("requestContext", {}).get("eventType") in {"CONNECT", "DISCONNECT", "MESSAGE"}:
        # A WebSocket API event (functions/ws): after the sample $connect, under its token's time
        cloud.reset(
            config=aws.model_copy(update={"ws_endpoint": WS_ENDPOINT}), clock=lambda: float(SIGNED_AT)
        )
        for step in ([] if name == "ws_connect.json" else [load("ws_connect.json")]) + [event]:
            assert ws.lambda_handler(step, context_for("sigil-ws")) == {"statusCode": 200}
    elif event.get("source") == "aws.cloudformation":
        # After a deploy: the precompile function puts the compiled runtime in its bucket
        # (from this machine's disk cache, which the sandbox tests fill; docs/sandbox.md)
        clients.s3(REGION).create_bucket(Bucket="samples-sandbox-cache")
        cloud.reset(config=aws.model_copy(update={"sandbox_cache_bucket": "samples-sandbox-cache"}))
        done = sandbox.lambda_handler(event, context_for("sigil-sandbox"))
        pointer = S3CompiledCache("samples-sandbox-cache", region=REGION).get(
            f"{cache_key(RUNTIME_SHA256)}/sha256"
        )
        assert pointer == str(done["sha256"]).encode()
    elif "detail-type" in event:
        cloud.reset(config=aws)
        result = consolidate.lambda_handler(event, context_for("sigil-consolidate"))
        trigger = "schedule" if event["source"] == "aws.events" else event["detail-type"]
        assert (result["trigger"], result["event_id"]) == (trigger, event["id"])
        assert result["outcome"] is None or result["outcome"]["status"] == "done", result
    else:
        pytest.fail(f"events/{name}: no handler takes an event of this shape")


def test_sign_at_the_pinned_time_gives_back_the_committed_sample(tmp_path: Path) -> None:
    # The committed signatures are what `sigil events sign --at` makes: the samples can be remade
    for name in SAMPLES:
        event = load(name)
        if "routeKey" not in event:
            continue
        out = tmp_path / name
        result = runner.invoke(
            app, ["events", "sign", str(EVENTS / name), "--at", str(SIGNED_AT), "-o", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text()) == event, name


def test_sign_refuses_what_is_not_a_webhook_sample() -> None:
    result = runner.invoke(app, ["events", "sign", str(EVENTS / "consolidate_schedule.json")])
    assert result.exit_code == 2
    assert "not an API Gateway HTTP API (payload v2) event" in result.output
