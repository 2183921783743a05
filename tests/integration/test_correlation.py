"""One message traced through the three Lambda handlers on moto by its correlation id
(docs/observability.md, "Correlation").

The webhook takes API Gateway's request id; the LaneItem carries it over SQS; the agent's turn
logs under it, audits it and puts it on the CompactionDue it publishes to EventBridge; the
consolidate function, handed that event as a rule delivers it, logs under it. The log lines are
the JSON lines powertools writes (its own formatter, on a handler of the "sigil" logger), told
apart by the function name the Lambda context gives them. The models are the real openai SDK
against the local OpenAI stand-in; OpenSearch is osmem-server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from osmem_server import OsmemServer
from starlette.testclient import TestClient

from functions.agent import handler as agent
from functions.consolidate import handler as consolidate
from functions.webhook import handler as webhook
from shared import cloud, correlation
from shared.adapters.aws import clients
from shared.channels import web
from shared.config import Settings
from shared.consolidation.compaction import ROLLING_SYSTEM, SUMMARY_SYSTEM
from shared.consolidation.extraction import EXTRACTION_SYSTEM
from shared.local.gateway import LocalGateway
from shared.local.logs import KeyValueFormatter
from shared.models import LaneItem, WorkspaceConfig
from shared.observability import logger
from tests.integration.test_handlers import SAMPLE_SECRET, SIGNED_AT, WS, load, queued, signed
from tests.support.consolidation import FakeConsolidator
from tests.support.fake_openai import FakeOpenAI, echo_last_user
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
def aws(osmem: OsmemServer, fake: FakeOpenAI) -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("correlation")
        clients.secretsmanager(REGION).create_secret(
            Name=f"sigil/{web.secret_name(WS)}", SecretString=SAMPLE_SECRET
        )
        config = resources.settings(
            secrets_prefix="sigil/",
            opensearch_endpoint=osmem.url,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
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


def post(event_id: str, text: str, request_id: str) -> dict[str, Any]:
    body = json.dumps({"event_id": event_id, "session": "demo", "user": "alice", "text": text})
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
    aws: AwsResources, json_lines: list[dict[str, Any]]
) -> None:
    # Given a workspace whose window is two messages, so the second turn rolls one batch of two out
    cloud.turn_deps().backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2, summary_batch=2))
    inbox = compaction_inbox(aws)
    # When two messages are posted, each its own request, and the agent runs the batch queued
    assert post("evt-0001", "What's on my calendar tomorrow?", FIRST)["statusCode"] == 202
    assert post("evt-0002", "And the day after?", TRACED)["statusCode"] == 202
    messages = queued(aws)
    assert [LaneItem.model_validate_json(m["Body"]).correlation_id for m in messages] == [FIRST, TRACED]
    assert agent.lambda_handler(agent_batch(messages), context_for(AGENT)) == {"batchItemFailures": []}
    # And the consolidate function receives the CompactionDue the second turn published
    sqs = clients.sqs(REGION)
    [delivered] = sqs.receive_message(QueueUrl=inbox)["Messages"]
    # moto's target leaves out the envelope's `account`, which AWS always sends.
    event = load("consolidate_schedule.json") | json.loads(delivered["Body"])
    assert (event["detail-type"], event["detail"]["correlation_id"]) == ("CompactionDue", TRACED)
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
    assert {line.get("correlation_id") for line in agent_lines} <= {FIRST, TRACED, None}
    # ... and on every line of the consolidation run it set off
    consolidate_lines = of(json_lines, CONSOLIDATE)
    assert consolidate_lines
    assert {line.get("correlation_id") for line in consolidate_lines} == {TRACED}
    # And each turn's audit record names its own request
    records = cloud.turn_deps().backend.audit.list_records(WS)
    assert {(r.event_id, r.correlation_id) for r in records} == {("evt-0001", FIRST), ("evt-0002", TRACED)}
    # And nothing is left bound once the invocations are over
    assert correlation.current() is None


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
