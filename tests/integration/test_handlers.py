"""The three Lambda handlers on in-process moto, fed the sample events in events/.

The webhook runs under a clock pinned at the sample's signing time with the sample secret in
Secrets Manager; the agent's model is the real openai SDK against tests/support/fake_openai.py.
Variants of a sample (a tampered body, a last delivery) are copies of the loaded event, changed.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws
from pydantic import ValidationError

from functions.agent import handler as agent
from functions.consolidate import handler as consolidate
from functions.webhook import handler as webhook
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.aws.events import EventBridgeBus
from shared.agent.turn import APOLOGY
from shared.channels import web
from shared.config import Settings
from shared.models import DomainEvent, LaneItem
from shared.observability import metrics
from tests.support.fake_openai import FakeOpenAI, echo_last_user
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
SIGNED_AT = 1767225600  # events/README.md: webhook_web.json is signed at this time ...
SAMPLE_SECRET = "sample-web-secret-not-real"  # ... with this secret, for workspace "default"
SAMPLE_TEXT = "What's on my calendar tomorrow?"
WS = "default"


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


CONTEXT: Any = context_for("sigil-test")


@pytest.fixture(autouse=True)
def no_metrics_of_earlier_tests() -> None:
    # The functions share one powertools Metrics object (shared.observability), which a handler
    # flushes: a turn another test ran outside a handler (every turn's memory search counts one
    # without embeddings) would otherwise show up in this module's emitted metrics.
    metrics.clear_metrics()


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("handlers")
        clients.secretsmanager(REGION).create_secret(
            Name=f"sigil/{web.secret_name(WS)}", SecretString=SAMPLE_SECRET
        )
        yield resources
        cloud.reset()


def settings_for(aws: AwsResources, **overrides: Any) -> Settings:
    return aws.settings(secrets_prefix="sigil/", **overrides)


@pytest.fixture
def pinned(aws: AwsResources) -> AwsResources:
    """The webhook's runtime: settings pointing at moto and the clock at the sample's signing time."""
    cloud.reset(config=settings_for(aws), clock=lambda: float(SIGNED_AT))
    return aws


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def web_demo(body: dict[str, Any]) -> bool:
    """Whether a model request is web.demo's (the sample batch's sessions run at once, so "the
    first call" is no particular session's): a FakeOpenAI.fail `when`."""
    return "buy milk" not in str(body["messages"][-1].get("content"))


@pytest.fixture
def agent_runtime(aws: AwsResources, fake: FakeOpenAI) -> AwsResources:
    # No SDK retries, so a scripted HTTP 500 is the turn's failure rather than a retried call.
    cloud.reset(
        config=settings_for(
            aws,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
        )
    )
    return aws


@pytest.fixture
def sigil_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record logged under "sigil" (powertools' logger and shared's stdlib loggers)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    logging.getLogger("sigil").addHandler(handler)
    yield records
    logging.getLogger("sigil").removeHandler(handler)


def signed(event: dict[str, Any], body: str) -> dict[str, Any]:
    """A copy of the sample POST with another body, signed with the sample secret at SIGNED_AT."""
    variant = copy.deepcopy(event)
    variant["body"] = body
    variant["headers"].update(
        {k.lower(): v for k, v in web.signed_headers(SAMPLE_SECRET, body.encode(), now=SIGNED_AT).items()}
    )
    return variant


def outbox_get(session: str, query: str = "") -> dict[str, Any]:
    """A copy of the sample POST turned into the signed GET of a session's outbox."""
    event = load("webhook_web.json")
    path = f"/sessions/{WS}/{session}/outbox"
    target = path + (f"?{query}" if query else "")
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET /sessions/{workspace}/{session}/outbox"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = "GET"
    event["rawQueryString"] = query
    if query:
        event["queryStringParameters"] = dict(part.split("=", 1) for part in query.split("&"))
    event["pathParameters"] = {"workspace": WS, "session": session}
    del event["body"], event["headers"]["content-type"], event["headers"]["content-length"]
    event["headers"].update(
        {k.lower(): v for k, v in web.signed_headers(SAMPLE_SECRET, target.encode(), now=SIGNED_AT).items()}
    )
    return event


def queued(aws: AwsResources) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = (
        clients.sqs(REGION)
        .receive_message(
            QueueUrl=aws.queue_url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        )
        .get("Messages", [])
    )
    return messages


def answer(response: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = json.loads(response["body"])
    return response["statusCode"], body


def emitted_metrics(stdout: str) -> dict[str, float]:
    """Metric name → value, from the CloudWatch EMF lines powertools printed."""
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                for metric in directive["Metrics"]:
                    value = blob[metric["Name"]]
                    found[metric["Name"]] = sum(value) if isinstance(value, list) else value
    return found


def lane_records(event: dict[str, Any]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for record in event["Records"]:
        groups.setdefault(record["attributes"]["MessageGroupId"], []).append(record["messageId"])
    return groups


def texts(session: str) -> list[str]:
    return [e.message.text for e in cloud.turn_deps().backend.outbox.read(WS, session)]


# ---------------------------------------------------------------- webhook


def test_a_signed_post_is_one_message_on_its_session_lane(
    pinned: AwsResources, capsys: pytest.CaptureFixture[str], sigil_logs: list[logging.LogRecord]
) -> None:
    # Given the sample POST, verified under the pinned clock and the stored sample secret
    event = load("webhook_web.json")
    # When the webhook handles it
    status, body = answer(webhook.lambda_handler(event, CONTEXT))
    # Then it is accepted, and exactly one message sits on the session's lane
    assert (status, body) == (202, {"status": "queued", "event_id": "evt-0001", "session": "demo"})
    [message] = queued(pinned)
    item = serde.loads(LaneItem, message["Body"])
    assert message["Attributes"]["MessageGroupId"] == item.inbound.lane_key == "default.web.demo"
    assert message["Attributes"]["MessageDeduplicationId"] == "default.web.evt-0001"
    assert (item.inbound.text, item.inbound.sender.id) == (SAMPLE_TEXT, "alice")
    assert emitted_metrics(capsys.readouterr().out) == {"MessagesQueued": 1}
    # And the message text appears in no log record, nor in any field of one
    assert sigil_logs, "the webhook logged nothing at all"
    assert not [r for r in sigil_logs if "calendar" in r.getMessage() or "calendar" in repr(r.__dict__)]


def test_a_tampered_body_is_refused_and_nothing_is_queued(pinned: AwsResources) -> None:
    # Given the sample POST with its body changed after signing
    event = load("webhook_web.json")
    event["body"] = event["body"].replace("tomorrow", "today")
    # When the webhook handles it, then it answers 401 and the lane stays empty
    assert answer(webhook.lambda_handler(event, CONTEXT)) == (
        401,
        {"error": "unauthorized", "message": "signature mismatch"},
    )
    assert queued(pinned) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "body is not valid JSON"),
        (
            '{"event_id": "evt-0009", "session": "demo", "user": "alice"}',
            # No text and no file (a file alone is a message: the chat page's photo without caption).
            "invalid message: body: text is empty and nothing is attached",
        ),
    ],
)
def test_a_malformed_body_signed_correctly_is_a_bad_request(
    pinned: AwsResources, body: str, reason: str
) -> None:
    # Given a correctly signed POST whose body is not a web message
    event = signed(load("webhook_web.json"), body)
    # When the webhook handles it, then it answers 400 with the reason and queues nothing
    assert answer(webhook.lambda_handler(event, CONTEXT)) == (
        400,
        {"error": "bad_request", "message": reason},
    )
    assert queued(pinned) == []


def test_a_base64_encoded_body_is_verified_as_the_bytes_sent(pinned: AwsResources) -> None:
    # Given the sample POST as API Gateway delivers a body it treats as binary
    event = load("webhook_web.json")
    event["body"] = base64.b64encode(event["body"].encode()).decode()
    event["isBase64Encoded"] = True
    # When the webhook handles it, then the signature over the decoded bytes holds
    assert answer(webhook.lambda_handler(event, CONTEXT))[0] == 202
    assert len(queued(pinned)) == 1


def test_an_unsigned_outbox_read_is_refused(pinned: AwsResources) -> None:
    event = outbox_get("demo")
    del event["headers"]["x-sigil-signature"]
    assert answer(webhook.lambda_handler(event, CONTEXT))[0] == 401


def test_the_webhook_makes_one_aws_call_per_accepted_message_once_warm(pinned: AwsResources) -> None:
    # Given a botocore hook counting every call the webhook's clients make
    calls: list[str] = []

    def count(model: Any, **_kwargs: Any) -> None:
        calls.append(model.name)

    for client in (clients.sqs(REGION), clients.secretsmanager(REGION), clients.dynamodb(REGION)):
        client.meta.events.register("before-call", count)
    # When a cold container accepts the sample message
    assert answer(webhook.lambda_handler(load("webhook_web.json"), CONTEXT))[0] == 202
    cold = list(calls)
    calls.clear()
    # And the same, now warm, container accepts another one
    second = signed(
        load("webhook_web.json"),
        json.dumps({"event_id": "evt-0002", "session": "demo", "user": "alice", "text": "And after?"}),
    )
    assert answer(webhook.lambda_handler(second, CONTEXT))[0] == 202
    warm = list(calls)
    # Then the cold one fetched the signing secret once, and the warm one only sent the message
    assert cold == ["GetSecretValue", "SendMessage"]
    assert warm == ["SendMessage"]
    assert len(queued(pinned)) == 2


def test_the_webhook_imports_no_llm_sdk_and_no_opensearch_client() -> None:
    # In a fresh interpreter: importing the handler and building its Ingress, as a cold start does
    script = """
import json, sys
import functions.webhook.handler
from shared import cloud
from shared.adapters.aws import clients
at_import = clients._client.cache_info().currsize
cloud.ingress()
print(json.dumps({"clients_at_import": at_import, "modules": sorted(sys.modules)}))
"""
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "SIGIL_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/turns.fifo",
        "SIGIL_SESSIONS_TABLE": "sessions",
    }
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    roots = {name.split(".")[0] for name in report["modules"]}
    assert report["clients_at_import"] == 0
    assert not roots & {"openai", "anthropic", "opensearchpy"}
    assert not {"shared.providers", "shared.adapters.aws.opensearch", "shared.agent.turn"} & set(
        report["modules"]
    )


def test_the_agent_imports_neither_compaction_nor_markdown_nor_the_webhooks_ingress() -> None:
    # In a fresh interpreter, as a cold start does: what only some turns need waits for them
    # (bench/aws_calls.py times the import and the first turn, docs/cost.md#cold-starts): the
    # compaction and extraction prompts (the consolidator's), Markdown rendering (the platform
    # channels') and the webhook's Ingress.
    script = """
import json, sys
import functions.agent.handler
print(json.dumps(sorted(sys.modules)))
"""
    env = {"PATH": "/usr/bin:/bin", "AWS_REGION": REGION}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    modules = set(json.loads(run.stdout.strip().splitlines()[-1]))
    deferred = {
        "markdown_it",
        "shared.consolidation.compaction",
        "shared.consolidation.extraction",
        "shared.consolidation.turn_extraction",
        "shared.ingress",
    }
    assert not deferred & modules
    # What the turn itself runs is imported up front, so that the first turn pays no more.
    assert {"shared.agent.turn", "shared.consolidation.turn_event", "shared.channels.format"} <= modules


def test_the_agents_import_compiles_neither_the_models_nor_the_time_patterns() -> None:
    # In a fresh interpreter, as a cold start does: shared.models' models (defer_build) and the
    # memory search's time patterns are compiled when first used, so that what a turn does not
    # use (schedules, triples, sandbox runs, index documents; a query naming no time) costs nothing.
    script = """
import json
import functions.agent.handler
import shared.models as models
from shared.memory import when
built = [n for n, v in vars(models).items() if isinstance(v, type) and issubclass(v, models.Model)
         and v.__pydantic_complete__]
print(json.dumps({"built": built, "patterns": when._patterns.cache_info().currsize}))
"""
    env = {"PATH": "/usr/bin:/bin", "AWS_REGION": REGION}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["patterns"] == 0
    assert not {
        "Session",
        "WorkspaceConfig",
        "Schedule",
        "Triple",
        "SandboxRun",
        "IndexDoc",
        "AuditRecord",
    } & set(report["built"])


# ---------------------------------------------------------------- agent


def test_a_batch_runs_each_sessions_turns_in_order(agent_runtime: AwsResources, fake: FakeOpenAI) -> None:
    # Given the sample batch (two turns of web.demo, one of web.kitchen) and a model that echoes
    event = load("agent_sqs_fifo_batch.json")
    # When the agent handles it
    response = agent.lambda_handler(event, CONTEXT)
    # Then every record succeeded, and each session's replies are in its outbox in order
    assert response == {"batchItemFailures": []}
    assert texts("web.demo") == [SAMPLE_TEXT, "And the day after?"]
    assert texts("web.kitchen") == ["Remind me to buy milk"]
    # (the sessions ran at once, so only each session's own calls have an order)
    asked = [r["messages"][-1]["content"] for r in fake.requests]
    assert sorted(asked) == sorted([SAMPLE_TEXT, "And the day after?", "Remind me to buy milk"])
    assert [a for a in asked if a != "Remind me to buy milk"] == [SAMPLE_TEXT, "And the day after?"]
    # And both sessions were saved with their turns
    demo = cloud.turn_deps().backend.sessions.get(WS, "web.demo")
    assert demo is not None
    assert demo.message_count == 4
    assert demo.recent_event_ids == ["evt-0001", "evt-0002"]


def test_a_batchs_sessions_run_at_once(agent_runtime: AwsResources, fake: FakeOpenAI) -> None:
    # Given the sample batch and a model that answers each session's first message only once the
    # other session's first message has reached it too (a run of one session after the other
    # never gets both there: the barrier breaks and the turn fails)
    both_there = threading.Barrier(2, timeout=60)

    def meet(body: dict[str, Any]) -> str:
        text = echo_last_user(body)
        if text in (SAMPLE_TEXT, "Remind me to buy milk"):
            both_there.wait()
        return text

    fake.set_default(meet)
    event = load("agent_sqs_fifo_batch.json")
    # When the agent handles it
    response = agent.lambda_handler(event, CONTEXT)
    # Then both sessions were at their model call at the same time, and every turn succeeded,
    # each session's in its order
    assert response == {"batchItemFailures": []}
    assert texts("web.demo") == [SAMPLE_TEXT, "And the day after?"]
    assert texts("web.kitchen") == ["Remind me to buy milk"]


def test_a_failed_turn_fails_the_rest_of_its_session_only(
    agent_runtime: AwsResources, fake: FakeOpenAI
) -> None:
    # Given a model that answers web.demo's first turn with HTTP 500
    fake.fail(500, when=web_demo)
    event = load("agent_sqs_fifo_batch.json")
    groups = lane_records(event)
    # When the agent handles the sample batch
    response = agent.lambda_handler(event, CONTEXT)
    # Then both web.demo records are reported failed (the second was never tried), web.kitchen's not
    assert response == {"batchItemFailures": [{"itemIdentifier": i} for i in groups["default.web.demo"]]}
    assert len(fake.requests) == 2
    assert texts("web.demo") == []
    assert texts("web.kitchen") == ["Remind me to buy milk"]
    # And nothing of web.demo was committed, so the retry starts from a clean session
    assert cloud.turn_deps().backend.sessions.get(WS, "web.demo") is None


def test_on_the_last_delivery_the_user_gets_an_apology_before_the_dead_letter_queue(
    agent_runtime: AwsResources, fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the sample batch delivered for the fifth time (the queue's maxReceiveCount)
    fake.fail(500, when=web_demo)
    event = load("agent_sqs_fifo_batch.json")
    for record in event["Records"]:
        record["attributes"]["ApproximateReceiveCount"] = "5"
    # When web.demo's first turn fails again
    response = agent.lambda_handler(event, CONTEXT)
    # Then both web.demo records still fail (so SQS dead-letters them for inspection) ...
    assert response["batchItemFailures"] == [
        {"itemIdentifier": i} for i in lane_records(event)["default.web.demo"]
    ]
    # ... and the user was told, once per message, in order, with their messages kept
    assert texts("web.demo") == [APOLOGY, APOLOGY]
    demo = cloud.turn_deps().backend.sessions.get(WS, "web.demo")
    assert demo is not None
    assert [m.content for m in demo.active_messages] == [SAMPLE_TEXT, "And the day after?"]
    assert texts("web.kitchen") == ["Remind me to buy milk"]
    emitted = emitted_metrics(capsys.readouterr().out)
    assert {k: emitted[k] for k in ("TurnsGivenUp", "TurnsCompleted", "TurnsFailed")} == {
        "TurnsGivenUp": 2,
        "TurnsCompleted": 1,
        "TurnsFailed": 2,
    }
    # (the per-turn metrics are tests/integration/test_agent_coalesce.py's)


def test_a_wholly_failed_batch_on_its_last_delivery_still_apologises(
    agent_runtime: AwsResources, fake: FakeOpenAI
) -> None:
    # Given a batch of web.demo's two records only, on their last delivery, and a failing model
    fake.fail(500)
    event = load("agent_sqs_fifo_batch.json")
    event["Records"] = [
        r for r in event["Records"] if r["attributes"]["MessageGroupId"] == "default.web.demo"
    ]
    for record in event["Records"]:
        record["attributes"]["ApproximateReceiveCount"] = "5"
    # When every record fails, the processor raises rather than answering (the whole batch returns)
    with pytest.raises(BatchProcessingError):
        agent.lambda_handler(event, CONTEXT)
    # Then the apologies were sent all the same
    assert texts("web.demo") == [APOLOGY, APOLOGY]


def test_an_unreadable_record_fails_alone_and_is_not_quoted_in_the_logs(
    agent_runtime: AwsResources, fake: FakeOpenAI, sigil_logs: list[logging.LogRecord]
) -> None:
    # Given the sample batch whose web.kitchen record's body is not a lane item (a stray field)
    event = load("agent_sqs_fifo_batch.json")
    kitchen = event["Records"][2]
    kitchen["body"] = kitchen["body"].replace('"chat_type":"dm"', '"chat_type":"dm","mood":"buy milk"')
    kitchen["attributes"]["ApproximateReceiveCount"] = "5"
    # When the agent handles it, then only that record fails and the other session's turns ran
    response = agent.lambda_handler(event, CONTEXT)
    assert response == {"batchItemFailures": [{"itemIdentifier": kitchen["messageId"]}]}
    assert texts("web.demo") == [SAMPLE_TEXT, "And the day after?"]
    # And the failure was logged with its reason, but without the message's text
    logged = "\n".join(logging.Formatter().format(r) + repr(r.__dict__) for r in sigil_logs)
    assert "body.inbound.mood" in logged
    assert "milk" not in logged


# ---------------------------------------------------------------- the three together


def test_a_message_posted_is_answered_and_read_back_through_the_outbox(
    agent_runtime: AwsResources, fake: FakeOpenAI
) -> None:
    # Given the webhook, with the agent's settings, under the pinned clock
    cloud.reset(config=cloud.settings(), clock=lambda: float(SIGNED_AT))
    # When the sample message is posted, and the agent receives what the webhook queued
    assert answer(webhook.lambda_handler(load("webhook_web.json"), CONTEXT))[0] == 202
    [message] = queued(agent_runtime)
    batch = load("agent_sqs_fifo_batch.json")
    record = batch["Records"][0]
    record.update(messageId=message["MessageId"], body=message["Body"])
    record["attributes"].update(message["Attributes"])
    batch["Records"] = [record]
    assert agent.lambda_handler(batch, CONTEXT) == {"batchItemFailures": []}
    # Then a signed GET of the outbox returns the reply
    status, body = answer(webhook.lambda_handler(outbox_get("demo", "after=0"), CONTEXT))
    assert status == 200
    assert body["next_after"] == 1
    [reply] = body["replies"]
    assert (reply["seq"], reply["text"], reply["in_reply_to"]) == (1, SAMPLE_TEXT, "evt-0001")
    # And reading after the last seq returns nothing new
    assert answer(webhook.lambda_handler(outbox_get("demo", "after=1"), CONTEXT)) == (
        200,
        {"replies": [], "next_after": None},
    )


# ---------------------------------------------------------------- consolidate


def received(result: dict[str, Any]) -> dict[str, Any]:
    """The part of the consolidate function's result that says what it was asked to do."""
    return {k: v for k, v in result.items() if k != "outcome"}


def test_the_hourly_schedule_is_received(aws: AwsResources, capsys: pytest.CaptureFixture[str]) -> None:
    cloud.reset(config=settings_for(aws))
    result = consolidate.lambda_handler(load("consolidate_schedule.json"), CONTEXT)
    assert received(result) == {
        "trigger": "schedule",
        "event_id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "workspace_id": None,
        "session_id": None,
        "detail": {},
        # The tick's task sweep (shared.tasks.sweep): no workspace, so no overdue task either.
        "tasks_swept": {"errors": 0, "raced": 0, "timed_out": 0, "workspaces": 0},
    }
    # The hourly run went over every workspace (there is none yet: nothing to do).
    assert (result["outcome"]["status"], result["outcome"]["workspaces"]) == ("done", [])
    emitted = emitted_metrics(capsys.readouterr().out)
    assert (emitted["ScheduleTicks"], emitted["SummariesWritten"]) == (1, 0)


def test_a_compaction_due_from_the_bus_is_received(
    aws: AwsResources, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a CompactionDue published by the agent's EventBridge adapter, as a rule delivers it
    sqs, events = clients.sqs(REGION), clients.events(REGION)
    inbox = sqs.create_queue(QueueName="consolidate-inbox")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name="compaction", EventBusName=aws.event_bus_name, EventPattern=json.dumps({"source": ["sigil"]})
    )
    events.put_targets(
        Rule="compaction", EventBusName=aws.event_bus_name, Targets=[{"Id": "inbox", "Arn": inbox_arn}]
    )
    EventBridgeBus(aws.event_bus_name, region=REGION).publish(
        DomainEvent(
            type="CompactionDue",
            workspace_id=WS,
            session_id="web.demo",
            detail={"first_seq": 0, "last_seq": 49},
        )
    )
    [message] = sqs.receive_message(QueueUrl=inbox)["Messages"]
    # moto's SQS target leaves out the envelope's `account`, which AWS always sends: the event is
    # the sample schedule's AWS-shaped envelope carrying what moto delivered.
    delivered = load("consolidate_schedule.json") | json.loads(message["Body"])
    # When the consolidate function receives it
    cloud.reset(config=settings_for(aws))
    result = consolidate.lambda_handler(delivered, CONTEXT)
    # Then it reports what is due, and counts the request
    assert received(result) == {
        "trigger": "CompactionDue",
        "event_id": delivered["id"],
        "workspace_id": WS,
        "session_id": "web.demo",
        "detail": {"first_seq": 0, "last_seq": 49},
    }
    # The session has no Tier-1 messages here, so the compaction found nothing to summarise
    # (tests/integration/test_consolidate_handler.py has sessions that do).
    assert (result["outcome"]["status"], result["outcome"]["summaries"]) == ("done", 0)
    emitted = emitted_metrics(capsys.readouterr().out)
    assert (emitted["CompactionRequests"], emitted["SummariesWritten"]) == (1, 0)


def test_an_event_that_is_neither_is_rejected() -> None:
    # A schedule-shaped event claiming to come from Sigil's bus carries no domain event
    event = load("consolidate_schedule.json")
    event["source"] = "sigil"
    with pytest.raises(ValidationError):
        consolidate.lambda_handler(event, CONTEXT)
