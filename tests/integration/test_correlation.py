"""One message traced through the three Lambda handlers on moto by its correlation id
(docs/observability.md, "Correlation").

The webhook takes API Gateway's request id; the LaneItem carries it over SQS; the agent's turn
logs under it (its outbound posts included: the web outbox's and a platform's), audits it and
puts it on the CompactionDue it publishes to EventBridge; the
consolidate function, handed that event as a rule delivers it, logs under it. Each invocation also
runs in an X-Ray segment, as Lambda opens one, and the segments the SDK sends to a UDP socket in
the X-Ray daemon's place carry the id as an annotation. The log lines are
the JSON lines powertools writes (its own formatter, on a handler of the "sigil" logger), told
apart by the function name the Lambda context gives them. The models are the real openai SDK
against the local OpenAI stand-in; OpenSearch is osmem-server.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aws_xray_sdk
import pytest
from aws_xray_sdk.core import xray_recorder
from moto import mock_aws
from osmem_server import OsmemServer
from starlette.testclient import TestClient

from functions.agent import handler as agent
from functions.consolidate import handler as consolidate
from functions.webhook import handler as webhook
from shared import cloud, correlation
from shared.adapters.aws import clients
from shared.channels import web
from shared.cli.events import SAMPLE_SECRETS
from shared.config import Settings
from shared.consolidation.compaction import ROLLING_SYSTEM, SUMMARY_SYSTEM
from shared.consolidation.extraction import EXTRACTION_SYSTEM
from shared.local.gateway import LocalGateway
from shared.local.logs import KeyValueFormatter
from shared.models import LaneItem, WorkspaceConfig
from shared.observability import logger, tracer
from tests.integration.test_handlers import SAMPLE_SECRET, SIGNED_AT, WS, load, queued, signed
from tests.support.consolidation import FakeConsolidator
from tests.support.fake_openai import FakeOpenAI, echo_last_user
from tests.support.fake_platforms import FakePlatforms
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

FIRST, TRACED = "Rq1aXmPLvHcESHA=", "Rq2bXmPLvHcESHA="  # API Gateway's request ids, in its shape
WEBHOOK, AGENT, CONSOLIDATE = "sigil-webhook", "sigil-agent", "sigil-consolidate"


@pytest.fixture
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    consolidator = FakeConsolidator()

    def answer(body: dict[str, Any]) -> str:
        # One stand-in for both models: the consolidation prompts by their system text, the turns echoed.
        if body["messages"][0]["content"] in (SUMMARY_SYSTEM, ROLLING_SYSTEM, EXTRACTION_SYSTEM):
            return consolidator.openai(body)
        return echo_last_user(body)

    with FakeOpenAI(answer) as server:
        yield server


@pytest.fixture
def platforms() -> Iterator[FakePlatforms]:
    with FakePlatforms() as server:
        yield server


@pytest.fixture
def aws(osmem: OsmemServer, fake: FakeOpenAI, platforms: FakePlatforms) -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("correlation")
        store = clients.secretsmanager(REGION)
        store.create_secret(Name=f"sigil/{web.secret_name(WS)}", SecretString=SAMPLE_SECRET)
        # Telegram's sample (events/webhook_telegram.json) verifies with its sample secret.
        name = "telegram/webhook-secret"
        store.create_secret(Name=f"sigil/{name}", SecretString=SAMPLE_SECRETS[name])
        store.create_secret(Name="sigil/telegram/bot-token", SecretString=platforms.tokens["telegram"])
        config = resources.settings(
            secrets_prefix="sigil/",
            opensearch_endpoint=osmem.url,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
        )
        # The clock at the sample's signing time, for the webhook's signature check.
        cloud.reset(config=config, clock=lambda: float(SIGNED_AT))
        yield resources
        cloud.reset()


@pytest.fixture
def json_lines() -> Iterator[list[dict[str, Any]]]:
    """Every line powertools' logger writes (the "sigil" logger and its children), parsed."""
    lines: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(logger.registered_formatter.format(record)))

    handler = Keep(level=logging.DEBUG)
    logging.getLogger("sigil").addHandler(handler)
    yield lines
    logging.getLogger("sigil").removeHandler(handler)
    logger.set_correlation_id(None)


class Traces:
    """A UDP socket in the X-Ray daemon's place, and each invocation run in a segment as Lambda's
    facade segment would hold it (powertools' tracer is off outside Lambda: switched on here)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    @contextmanager
    def segment(self, name: str) -> Iterator[None]:
        xray_recorder.begin_segment(name, sampling=1)
        try:
            yield
        finally:
            xray_recorder.end_segment()

    def received(self) -> list[dict[str, Any]]:
        """Every segment and streamed subsegment the SDK sent (header line, then the document)."""
        entities: list[dict[str, Any]] = []
        self._sock.settimeout(0.5)
        while True:
            try:
                datagram = self._sock.recv(65536)
            except TimeoutError:
                return entities
            entities.append(json.loads(datagram.decode().split("\n", 1)[1]))


def annotated(entity: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(name, correlation_id) of the entity and each of its subsegments annotated with one."""
    value = entity.get("annotations", {}).get(correlation.KEY)
    if value is not None:
        yield entity["name"], value
    for child in entity.get("subsegments", []):
        yield from annotated(child)


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[Traces]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    was_enabled = aws_xray_sdk.global_sdk_config.sdk_enabled()
    aws_xray_sdk.global_sdk_config.set_sdk_enabled(True)
    monkeypatch.setattr(tracer, "disabled", False)
    xray_recorder.configure(daemon_address=f"{host}:{port}")
    try:
        yield Traces(sock)
    finally:
        xray_recorder.configure(daemon_address="127.0.0.1:2000")  # the SDK's default
        xray_recorder.clear_trace_entities()
        aws_xray_sdk.global_sdk_config.set_sdk_enabled(was_enabled)
        sock.close()


def post(event_id: str, text: str, request_id: str, session: str = "demo") -> dict[str, Any]:
    body = json.dumps({"event_id": event_id, "session": session, "user": "alice", "text": text})
    event = signed(load("webhook_web.json"), body)
    event["requestContext"]["requestId"] = request_id
    return webhook.lambda_handler(event, context_for(WEBHOOK))


def compaction_inbox(aws: AwsResources) -> str:
    """An SQS queue a rule fills with what the agent publishes on Sigil's bus (moto's SQS target
    stands in for the consolidate function's Lambda target)."""
    sqs, events = clients.sqs(REGION), clients.events(REGION)
    inbox = sqs.create_queue(QueueName="consolidate-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="compaction", EventBusName=aws.event_bus_name, EventPattern=json.dumps({"source": ["sigil"]})
    )
    events.put_targets(
        Rule="compaction", EventBusName=aws.event_bus_name, Targets=[{"Id": "inbox", "Arn": arn}]
    )
    return inbox


def agent_batch(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The queued messages as the SQS event Lambda delivers (the sample batch's records, refilled)."""
    template = load("agent_sqs_fifo_batch.json")["Records"][0]
    records = []
    for message in messages:
        record = json.loads(json.dumps(template))
        record.update(messageId=message["MessageId"], body=message["Body"])
        record["attributes"].update(message["Attributes"])
        records.append(record)
    return {"Records": records}


def of(lines: list[dict[str, Any]], function: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("function_name") == function]


def test_one_correlation_id_runs_from_the_webhook_through_the_turn_into_the_consolidation(
    aws: AwsResources, json_lines: list[dict[str, Any]], traces: Traces
) -> None:
    # Given a workspace whose window is two messages, so the second turn rolls one batch of two out
    cloud.turn_deps().backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2, summary_batch=2))
    inbox = compaction_inbox(aws)
    # When two messages are posted, each its own request, and the agent runs the batch queued
    with traces.segment(WEBHOOK):
        assert post("evt-0001", "What's on my calendar tomorrow?", FIRST)["statusCode"] == 202
    with traces.segment(WEBHOOK):
        assert post("evt-0002", "And the day after?", TRACED)["statusCode"] == 202
    messages = queued(aws)
    assert [LaneItem.model_validate_json(m["Body"]).correlation_id for m in messages] == [FIRST, TRACED]
    with traces.segment(AGENT):
        assert agent.lambda_handler(agent_batch(messages), context_for(AGENT)) == {"batchItemFailures": []}
    # And the consolidate function receives the CompactionDue the second turn published
    sqs = clients.sqs(REGION)
    [delivered] = sqs.receive_message(QueueUrl=inbox)["Messages"]
    # moto's target leaves out the envelope's `account`, which AWS always sends.
    event = load("consolidate_schedule.json") | json.loads(delivered["Body"])
    assert (event["detail-type"], event["detail"]["correlation_id"]) == ("CompactionDue", TRACED)
    with traces.segment(CONSOLIDATE):
        result = consolidate.lambda_handler(event, context_for(CONSOLIDATE))
    assert (result["trigger"], result["outcome"]["status"], result["outcome"]["summaries"]) == (
        "CompactionDue",
        "done",
        1,
    )

    # Then the traced request's id is on the webhook's lines for it ...
    webhook_lines = of(json_lines, WEBHOOK)
    assert [line for line in webhook_lines if line.get("correlation_id") == TRACED]
    assert {line.get("correlation_id") for line in webhook_lines} == {FIRST, TRACED}
    # ... on the agent's lines of its turn, the turn's own line among them ...
    agent_lines = of(json_lines, AGENT)
    traced_turn = [line for line in agent_lines if line.get("correlation_id") == TRACED]
    assert [line for line in traced_turn if line["message"] == "turn"], traced_turn
    # ... its outbound post (the web outbox's) among them ...
    assert [line for line in traced_turn if line["message"] == "reply posted"], traced_turn
    assert {line.get("correlation_id") for line in agent_lines} <= {FIRST, TRACED, None}
    # ... and on every line of the consolidation run it set off
    consolidate_lines = of(json_lines, CONSOLIDATE)
    assert consolidate_lines
    assert {line.get("correlation_id") for line in consolidate_lines} == {TRACED}
    # And each turn's audit record names its own request
    records = cloud.turn_deps().backend.audit.list_records(WS)
    assert {(r.event_id, r.correlation_id) for r in records} == {("evt-0001", FIRST), ("evt-0002", TRACED)}
    # And in the traces: each webhook request's segment, each turn's subsegment and the
    # consolidation run's are annotated with the id, so one search finds all three functions'
    found = [
        (segment["name"], name, cid) for segment in traces.received() for name, cid in annotated(segment)
    ]
    assert {(function, cid) for function, _, cid in found} == {
        (WEBHOOK, FIRST),
        (WEBHOOK, TRACED),
        (AGENT, FIRST),
        (AGENT, TRACED),
        (CONSOLIDATE, TRACED),
    }
    # (the agent's in the subsegment of each turn, named after the function that runs it)
    assert [name for function, name, cid in found if function == AGENT] == ["## shared.agent.batch.turn"] * 2
    # And nothing is left bound once the invocations are over
    assert correlation.current() is None


def test_the_sessions_of_a_batch_run_at_once_each_turn_logging_under_its_own_id(
    aws: AwsResources, json_lines: list[dict[str, Any]]
) -> None:
    # Given two sessions' messages, each posted in its own request, in one agent batch
    assert post("evt-0001", "What's on my calendar tomorrow?", FIRST)["statusCode"] == 202
    assert post("evt-0002", "Remind me to buy milk", TRACED, session="kitchen")["statusCode"] == 202
    messages = queued(aws)
    assert len({m["Attributes"]["MessageGroupId"] for m in messages}) == 2
    # When the agent runs them, each session in its own worker thread
    assert agent.lambda_handler(agent_batch(messages), context_for(AGENT)) == {"batchItemFailures": []}
    # Then each turn's line, and its reply's, carry the id of the request it answers, never the
    # other session's (the logger's own keys are one per process; a worker's are its thread's)
    agent_lines = of(json_lines, AGENT)
    turns = {
        (line["session_id"], line.get("correlation_id")) for line in agent_lines if line["message"] == "turn"
    }
    assert turns == {("web.demo", FIRST), ("web.kitchen", TRACED)}
    posted = [line.get("correlation_id") for line in agent_lines if line["message"] == "reply posted"]
    assert sorted(posted) == sorted([FIRST, TRACED])
    assert correlation.current() is None


def test_a_platform_reply_is_posted_under_the_id_of_the_request_it_answers(
    aws: AwsResources, json_lines: list[dict[str, Any]], platforms: FakePlatforms
) -> None:
    # Given Telegram's sample webhook, delivered under API Gateway's request id
    event = load("webhook_telegram.json")
    request_id = event["requestContext"]["requestId"]
    assert webhook.lambda_handler(event, context_for(WEBHOOK))["statusCode"] == 200
    [message] = queued(aws)
    assert LaneItem.model_validate_json(message["Body"]).correlation_id == request_id
    # When the agent runs its turn, which answers on Telegram
    assert agent.lambda_handler(agent_batch([message]), context_for(AGENT)) == {"batchItemFailures": []}
    assert platforms.calls("telegram", "sendMessage")

    # Then the agent's line for each Telegram message it posted carries the request's id
    posted = [line for line in of(json_lines, AGENT) if line["message"] == "reply posted"]
    assert posted and all(line["platform"] == "telegram" for line in posted), posted
    assert {line.get("correlation_id") for line in posted} == {request_id}
    assert len(posted) == len(platforms.calls("telegram", "sendMessage"))


def test_the_local_gateway_gives_each_request_an_id_and_its_turn_logs_under_it(tmp_path: Path) -> None:
    # Given the local gateway (embedded backend, no model), its log lines as `sigil dev` prints them
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep(level=logging.DEBUG)
    handler.setFormatter(KeyValueFormatter())
    handler.addFilter(correlation.Stamp())
    logging.getLogger("sigil").addHandler(handler)
    gw = LocalGateway(Settings(data_dir=tmp_path / "state"))
    try:
        secret = gw.ensure_workspace(WS)
        client = TestClient(gw.app())
        # When two sessions each post a message, and the lanes run them (in parallel workers)
        answered: dict[str, str] = {}
        for session in ("s1", "s2"):
            body = json.dumps({"event_id": f"e-{session}", "session": session, "user": "u", "text": "hi"})
            headers = web.signed_headers(secret, body.encode())
            response = client.post(f"/webhooks/web/{WS}", content=body, headers=headers)
            assert response.status_code == 202
            answered[f"e-{session}"] = response.headers["apigw-requestid"]
        gw.start()
        assert gw.runner.wait_idle(30)
        records = {r.event_id: r.correlation_id for r in gw.backend.audit.list_records(WS)}
    finally:
        gw.stop()
        logging.getLogger("sigil").removeHandler(handler)
    # Then each turn's line carries the id its request was answered with, which its audit record holds
    assert records == answered and len(set(answered.values())) == 2
    for event_id, correlation_id in records.items():
        [turn] = [line for line in lines if " sigil.turn: turn " in line and f"event_id={event_id} " in line]
        assert f"correlation_id={correlation_id}" in turn
