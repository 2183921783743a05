"""The stand-ins of `sigil dev --aws`, piece by piece: the events they build against the samples in
events/, the partial-batch rules of the poller, and the moto gap the mode closes.

End to end, the mode is exercised by tests/e2e/test_aws_mode.py; these pin the shapes.
"""

from __future__ import annotations

import calendar
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from shared.agent.batch import TurnRecord
from shared.channels import web
from shared.local import aws_mode
from shared.local.lambda_runtime import InvocationError

EVENTS = Path(__file__).resolve().parents[2] / "events"
SIGNED_AT = 1767225600  # events/README.md


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def test_the_http_api_event_has_the_samples_shape_and_values() -> None:
    # Given the request that events/webhook_web.json records
    sample = load("webhook_web.json")
    headers = [(k.title(), v) for k, v in sample["headers"].items()]  # as a client might spell them
    # When the front turns it into an event
    event = aws_mode.http_api_event(
        route_key=aws_mode.POST_WEB,
        method="POST",
        raw_path="/webhooks/web/default",
        raw_query="",
        headers=headers,
        body=sample["body"].encode(),
        path_parameters={"workspace": "default"},
        source_ip="203.0.113.7",
        now=SIGNED_AT,
        api_id="abc123",
    )
    # Then it is the sample, but for the request id API Gateway makes up
    assert event["requestContext"].pop("requestId")
    del sample["requestContext"]["requestId"]
    assert event == sample


def test_query_cookies_and_binary_bodies_follow_payload_2() -> None:
    event = aws_mode.http_api_event(
        route_key=aws_mode.GET_OUTBOX,
        method="GET",
        raw_path="/sessions/default/s1/outbox",
        raw_query="after=3&x=1&x=2",
        headers=[("Cookie", "a=1; b=2"), ("X-Many", "1"), ("x-many", "2")],
        body=b"\xff\x00",
        path_parameters={"workspace": "default", "session": "s1"},
    )
    assert event["queryStringParameters"] == {"after": "3", "x": "1,2"}
    assert event["cookies"] == ["a=1", "b=2"] and "cookie" not in event["headers"]
    assert event["headers"]["x-many"] == "1,2"
    assert event["isBase64Encoded"] is True and event["body"] == "/wA="


def test_a_get_without_a_body_has_no_body_key() -> None:
    event = aws_mode.http_api_event(
        route_key=aws_mode.GET_OUTBOX,
        method="GET",
        raw_path="/sessions/default/s1/outbox",
        raw_query="",
        headers=[],
        body=b"",
        path_parameters={"workspace": "default", "session": "s1"},
    )
    assert "body" not in event and "queryStringParameters" not in event
    assert event["isBase64Encoded"] is False


def test_the_proxy_response_is_mapped_back_to_http() -> None:
    response = aws_mode.proxy_response(
        {
            "statusCode": 401,
            "body": '{"error": "unauthorized"}',
            "isBase64Encoded": False,
            "headers": {"Content-Type": "application/json"},
            "cookies": ["a=1", "b=2"],
        }
    )
    assert response.status_code == 401 and response.body == b'{"error": "unauthorized"}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers.getlist("set-cookie") == ["a=1", "b=2"]
    # A function that answers without a statusCode gets API Gateway's inferred 200 + JSON
    inferred = aws_mode.proxy_response({"ok": True})
    assert (inferred.status_code, json.loads(inferred.body)) == (200, {"ok": True})


def sample_messages() -> list[dict[str, Any]]:
    """The records of events/agent_sqs_fifo_batch.json, as ReceiveMessage returned them."""
    return [
        {
            "MessageId": r["messageId"],
            "ReceiptHandle": r["receiptHandle"],
            "Body": r["body"],
            "Attributes": r["attributes"],
            "MD5OfBody": r["md5OfBody"],
        }
        for r in load("agent_sqs_fifo_batch.json")["Records"]
    ]


def test_the_sqs_event_has_the_samples_shape_and_parses_as_turn_records() -> None:
    sample = load("agent_sqs_fifo_batch.json")
    event = aws_mode.sqs_event(
        sample_messages(), queue_arn="arn:aws:sqs:eu-west-1:123456789012:turns.fifo", region="eu-west-1"
    )
    assert event == sample
    # and the agent's own record model reads every record
    assert [TurnRecord.model_validate(r).body.inbound.event_id for r in event["Records"]] == [
        "evt-0001",
        "evt-0002",
        "evt-0003",
    ]


def test_message_attributes_take_lambdas_spelling() -> None:
    [message] = copy.deepcopy(sample_messages()[:1])
    message["MessageAttributes"] = {
        "kind": {"StringValue": "turn", "DataType": "String"},
        "raw": {"BinaryValue": b"\x01\x02", "DataType": "Binary"},
    }
    [record] = aws_mode.sqs_event([message], queue_arn="arn", region="r")["Records"]
    assert record["messageAttributes"] == {
        "kind": {"stringValue": "turn", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
        "raw": {"binaryValue": "AQI=", "stringListValues": [], "binaryListValues": [], "dataType": "Binary"},
    }


class FakeSqs:
    """Records the poller's deletes; hands out one batch."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.deleted: list[str] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        batch, self.messages = self.messages, []
        return {"Messages": batch}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.deleted += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def poll_with(answer: Any) -> list[str]:
    sqs = FakeSqs(sample_messages())

    def invoke(event: dict[str, Any]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    poller = aws_mode.FifoPoller(sqs, queue_url="q", queue_arn="arn", region="r", invoke=invoke)
    assert poller.poll_once() == 3
    return [h[-1] for h in sqs.deleted]  # the sample's receipt handles end in 0, 1, 2


@pytest.mark.parametrize(
    ("answer", "deleted"),
    [
        ({"batchItemFailures": []}, ["0", "1", "2"]),
        (None, ["0", "1", "2"]),
        ({"batchItemFailures": [{"itemIdentifier": "11d6ee51-4cc7-4302-9e22-7cd8afdaadf1"}]}, ["0", "2"]),
        # Lambda fails the whole batch for an id that is not in it, an empty id, or an error
        ({"batchItemFailures": [{"itemIdentifier": "not-in-the-batch"}]}, []),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, []),
        (InvocationError("BatchProcessingError", "All records failed processing."), []),
    ],
)
def test_the_poller_deletes_exactly_what_lambda_would(answer: Any, deleted: list[str]) -> None:
    assert poll_with(answer) == deleted


def test_the_schedule_event_is_what_the_consolidate_handler_accepts() -> None:
    from shared.consolidation.trigger import ConsolidateEvent, receive

    sample = load("consolidate_schedule.json")
    event = aws_mode.schedule_event("eu-west-1", now=calendar.timegm((2026, 1, 1, 1, 0, 0)))
    assert event.keys() == sample.keys()
    assert (event["time"], event["detail"], event["source"]) == (sample["time"], {}, "aws.events")
    assert receive(ConsolidateEvent.model_validate(event)).trigger == "schedule"


def test_moto_redelivers_a_timed_out_fifo_batch_in_order_under_the_patch() -> None:
    with mock_aws(), aws_mode.fifo_redelivery_in_order():
        import boto3

        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="order.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for i in range(3):
            sqs.send_message(
                QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=f"d{i}"
            )
        first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1)["Messages"]
        assert [m["Body"] for m in first] == ["m0", "m1", "m2"]
        time.sleep(1.1)  # the whole batch times out, as a failed Lambda batch does
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        # Unpatched, moto 5 hands back ["m2"] first and m0, m1 only after it
        assert [m["Body"] for m in again] == ["m0", "m1", "m2"]


def test_a_web_signature_made_for_the_front_verifies_in_the_event_the_front_builds() -> None:
    # The front passes the body through untouched: what the client signed is what the webhook sees.
    body = b'{"event_id":"e","session":"s","user":"u","text":"h\xc3\xa9"}'
    headers = web.signed_headers("k", body, now=SIGNED_AT)
    event = aws_mode.http_api_event(
        route_key=aws_mode.POST_WEB,
        method="POST",
        raw_path="/webhooks/web/default",
        raw_query="",
        headers=list(headers.items()),
        body=body,
        path_parameters={"workspace": "default"},
    )
    assert event["body"].encode() == body
    web.verify("k", event["headers"], event["body"].encode(), now=SIGNED_AT)


# ---------------------------------------------------------------- EventBridge Scheduler's stand-in

GROUP = "sigil-local-schedules"


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _scheduler_and_queue() -> tuple[Any, Any, str, str]:
    import boto3

    scheduler = boto3.client("scheduler", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    scheduler.create_schedule_group(Name=GROUP)
    url = sqs.create_queue(
        QueueName="turns.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return scheduler, sqs, url, arn


def _schedule(scheduler: Any, name: str, arn: str, expression: str, zone: str, action: str) -> None:
    from shared.adapters.aws.schedules import SCHEDULED_TIME

    scheduler.create_schedule(
        Name=name,
        GroupName=GROUP,
        ScheduleExpression=expression,
        ScheduleExpressionTimezone=zone,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": arn,
            "RoleArn": "arn:aws:iam::123456789012:role/sigil-local-scheduler",
            "Input": json.dumps({"name": name, "at": SCHEDULED_TIME}),
            "SqsParameters": {"MessageGroupId": "default.web.s1"},
            "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 20},
        },
        ActionAfterCompletion=action,
    )


def _received(sqs: Any, url: str) -> list[dict[str, Any]]:
    found = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
    ).get("Messages", [])
    for message in found:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return [json.loads(m["Body"]) | {"group": m["Attributes"]["MessageGroupId"]} for m in found]


def test_a_one_time_schedule_is_sent_once_at_its_moment_then_deletes_itself() -> None:
    from shared.local.aws_mode.scheduler import SchedulerStandIn

    with mock_aws():
        scheduler, sqs, url, arn = _scheduler_and_queue()
        # Given an at() schedule in Paris time: 09:00 there is 08:00 UTC in January
        _schedule(scheduler, "once", arn, "at(2030-01-07T09:00:00)", "Europe/Paris", "DELETE")
        clock = _Clock(calendar.timegm((2030, 1, 7, 7, 59, 59)))
        stand_in = SchedulerStandIn(scheduler, sqs, group=GROUP, clock=clock)
        # When the stand-in looks before its moment, nothing is sent
        assert stand_in.fire_due() == 0 and _received(sqs, url) == []
        # When it looks at its moment: its Input, the time filled in, to the target's group
        clock.now += 1
        assert stand_in.fire_due() == 1
        assert _received(sqs, url) == [
            {"name": "once", "at": "2030-01-07T08:00:00Z", "group": "default.web.s1"}
        ]
        # and then the schedule is gone (ActionAfterCompletion DELETE), and nothing is sent again
        assert scheduler.list_schedules(GroupName=GROUP)["Schedules"] == []
        clock.now += 60
        assert stand_in.fire_due() == 0 and _received(sqs, url) == []


def test_a_cron_schedule_fires_in_its_zone_across_dst_and_drops_what_is_too_old() -> None:
    from shared.local.aws_mode.scheduler import SchedulerStandIn

    with mock_aws():
        scheduler, sqs, url, arn = _scheduler_and_queue()
        # Given every Monday at 09:00 in Paris, created now (years before the Mondays below)
        _schedule(scheduler, "weekly", arn, "cron(0 9 ? * MON *)", "Europe/Paris", "NONE")
        clock = _Clock(calendar.timegm((2030, 3, 25, 8, 0, 30)))
        stand_in = SchedulerStandIn(scheduler, sqs, group=GROUP, clock=clock)
        # When the stand-in first looks on Monday 25 March 2030 just after 09:00 in Paris (CET):
        # the Mondays since its creation are older than the target's hour, so they are dropped
        # one by one, and then that Monday's is sent
        while not (sent := _received(sqs, url)):
            stand_in.fire_due()
        assert sent == [{"name": "weekly", "at": "2030-03-25T08:00:00Z", "group": "default.web.s1"}]
        # After the change to summer time, 09:00 in Paris is 07:00 UTC: not before
        clock.now = calendar.timegm((2030, 4, 1, 6, 59, 59))
        assert stand_in.fire_due() == 0
        clock.now += 1
        assert stand_in.fire_due() == 1
        assert _received(sqs, url) == [
            {"name": "weekly", "at": "2030-04-01T07:00:00Z", "group": "default.web.s1"}
        ]
        # and a recurring schedule stays
        assert [s["Name"] for s in scheduler.list_schedules(GroupName=GROUP)["Schedules"]] == ["weekly"]
