"""Things done later on the aws backend, on moto (docs/schedules.md): the schedule tool makes an
EventBridge Scheduler schedule whose target is the turns queue; the test delivers its target's
Input as Scheduler does (moto stores schedules but never fires them): the Input with the
occurrence's time filled in, sent to the FIFO queue with the schedule's MessageGroupId and no
deduplication id. The real agent handler then runs the turn: the reminder arrives once, a
recurring task fires on each occurrence, cancelling removes the schedule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.sqs import models as sqs_models

from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.schedules import SCHEDULED_TIME, EventBridgeSchedules
from shared.models import Recurrence, ScheduleLimits, new_workspace
from shared.observability import metrics
from shared.schedules import REMINDER_PREFIX, ScheduleCapReached, create
from tests.integration.test_channels_end_to_end import run_agent
from tests.integration.test_schedules import AT_UTC, SESSION, WS, inbound, model
from tests.support.fake_openai import FakeOpenAI
from tests.support.moto_aws import REGION, AwsResources, provision

GROUP = "sigil-test-schedules"
ROLE = "arn:aws:iam::123456789012:role/sigil-test-scheduler"


@pytest.fixture
def stack() -> Iterator[tuple[AwsResources, EventBridgeSchedules, str]]:
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
            patch.delenv(name, raising=False)
        stack.callback(metrics.clear_metrics)
        every_fifo_message_numbered(patch)
        stack.enter_context(mock_aws())
        fake = stack.enter_context(FakeOpenAI(model))
        stack.callback(cloud.reset)
        clients.reset()
        aws = provision("sched")
        clients.scheduler(REGION).create_schedule_group(Name=GROUP)
        queue_arn = clients.sqs(REGION).get_queue_attributes(
            QueueUrl=aws.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        settings = aws.settings(
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            schedule_group=GROUP,
            schedule_role_arn=ROLE,
            queue_arn=queue_arn,
        )
        cloud.reset(config=settings)
        store = cloud.turn_deps().backend.schedules
        assert isinstance(store, EventBridgeSchedules)
        yield aws, store, queue_arn


def every_fifo_message_numbered(patch: pytest.MonkeyPatch) -> None:
    """SQS gives every FIFO message a SequenceNumber; moto only one sent with an explicit
    deduplication id, and Scheduler sends none. The agent's records carry it (the Lambda sample's
    attributes), so the stand-in numbers every message, as SQS does."""
    numbers = itertools.count(1)
    original = sqs_models.Message.__init__

    def numbered(self: sqs_models.Message, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.sequence_number = f"{next(numbers):020d}"

    patch.setattr(sqs_models.Message, "__init__", numbered)


def scheduled(store: EventBridgeSchedules, name: str) -> dict[str, Any]:
    found: dict[str, Any] = store.scheduler.get_schedule(GroupName=GROUP, Name=name)
    return found


def deliver(aws: AwsResources, schedule: dict[str, Any], at: datetime) -> None:
    """What EventBridge Scheduler does at an occurrence: its target's Input, the time filled in,
    to the FIFO queue with the schedule's group id and no deduplication id."""
    target = schedule["Target"]
    clients.sqs(REGION).send_message(
        QueueUrl=aws.queue_url,
        MessageBody=target["Input"].replace(SCHEDULED_TIME, at.strftime("%Y-%m-%dT%H:%M:%SZ")),
        MessageGroupId=target["SqsParameters"]["MessageGroupId"],
    )


def texts(store: EventBridgeSchedules) -> list[str]:
    return [e.message.text for e in cloud.turn_deps().backend.outbox.read(WS, SESSION)]


def test_a_reminder_set_in_a_turn_arrives_once_through_the_schedulers_target(
    stack: tuple[AwsResources, EventBridgeSchedules, str],
) -> None:
    aws, store, queue_arn = stack
    # Given a turn, through the agent handler, that sets "remind me at 9" for a user in Paris
    clients.sqs(REGION).send_message(
        QueueUrl=aws.queue_url,
        MessageBody=inbound("e1", "remind me at 9 to call mom").model_dump_json(),
        MessageGroupId=f"{WS}.{SESSION}",
        MessageDeduplicationId="e1",
    )
    assert len(run_agent(aws)) == 1
    (made,) = store.list_schedules(WS)
    # Then EventBridge Scheduler holds one schedule at 08:00 UTC, aimed at the session's lane
    (summary,) = store.scheduler.list_schedules(GroupName=GROUP)["Schedules"]
    schedule = scheduled(store, summary["Name"])
    assert schedule["ScheduleExpression"] == "at(2030-01-07T08:00:00)"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == queue_arn and schedule["Target"]["RoleArn"] == ROLE
    assert schedule["Target"]["SqsParameters"] == {"MessageGroupId": f"{WS}.{SESSION}"}

    # When Scheduler delivers the occurrence, and retries it
    deliver(aws, schedule, AT_UTC)
    deliver(aws, schedule, AT_UTC)
    handed = run_agent(aws)
    # Then the queue dropped the retry, and the reminder arrived on the session's outbox once
    assert len(handed) == 1 and handed[0].fired is not None and handed[0].fired.schedule.id == made.id
    assert texts(store)[-1] == f"{REMINDER_PREFIX}call mom"
    # and a redelivery after SQS's window (its own deduplication id) is dropped by the turn
    redelivered = handed[0].model_dump_json()
    clients.sqs(REGION).send_message(
        QueueUrl=aws.queue_url,
        MessageBody=redelivered,
        MessageGroupId=f"{WS}.{SESSION}",
        MessageDeduplicationId="r",
    )
    assert len(run_agent(aws)) == 1
    assert [t for t in texts(store) if t.startswith(REMINDER_PREFIX)] == [f"{REMINDER_PREFIX}call mom"]


def test_a_recurring_task_fires_on_each_occurrence_and_cancelling_removes_it(
    stack: tuple[AwsResources, EventBridgeSchedules, str],
) -> None:
    aws, store, _ = stack
    origin = inbound("e1", "every Monday send me the week's plan").inbound
    weekly, _first = create(
        store,
        new_workspace(WS),
        origin,
        user_id="web:alice",
        kind="task",
        text="send me the week's plan",
        at=None,
        recurrence=Recurrence(every="week", days=["mon"], time="09:00"),
        tz_name="Europe/Paris",
        now=datetime(2030, 3, 1, tzinfo=UTC),
    )
    (summary,) = store.scheduler.list_schedules(GroupName=GROUP)["Schedules"]
    schedule = scheduled(store, summary["Name"])
    # Scheduler reads the cron in the user's zone: 09:00 in Paris on both sides of DST
    assert schedule["ScheduleExpression"] == "cron(0 9 ? * MON *)"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/Paris"
    assert schedule["ActionAfterCompletion"] == "NONE"
    # When two Mondays come (before and after the DST change), each occurrence is a turn
    for at in (datetime(2030, 3, 25, 8, tzinfo=UTC), datetime(2030, 4, 1, 7, tzinfo=UTC)):
        deliver(aws, schedule, at)
        (item,) = run_agent(aws)
        assert item.inbound.event_id == f"{weekly.id}.{int(at.timestamp())}"
    # the model was asked to do the task each time
    tasks = [t for t in texts(store) if "A scheduled task is due now" in t]
    assert len(tasks) == 2 and all("send me the week's plan" in t for t in tasks)
    # When it is cancelled, Scheduler no longer holds it and nothing is listed
    assert store.cancel(WS, weekly.id)
    assert store.scheduler.list_schedules(GroupName=GROUP)["Schedules"] == []
    assert store.list_schedules(WS) == [] and store.get(WS, weekly.id) is None


def test_the_caps_count_the_users_live_schedules(
    stack: tuple[AwsResources, EventBridgeSchedules, str],
) -> None:
    _, store, _ = stack
    workspace = new_workspace(WS).model_copy(
        update={"schedules": ScheduleLimits(per_user=1, per_workspace=2)}
    )
    origin = inbound("e1", "remind me").inbound

    def make(user: str) -> None:
        create(
            store,
            workspace,
            origin,
            user_id=user,
            kind="message",
            text="stretch",
            at=None,
            recurrence=Recurrence(every="day"),
            tz_name="UTC",
            now=datetime(2030, 3, 1, tzinfo=UTC),
        )

    make("alice")
    with pytest.raises(ScheduleCapReached, match="You already have 1 schedules"):
        make("alice")
    make("bob")
    with pytest.raises(ScheduleCapReached, match="This workspace holds the most"):
        make("carol")
    assert store.count(WS) == 2 and store.count(WS, user_id="bob") == 1


def test_a_schedule_scheduler_refuses_leaves_no_record(
    stack: tuple[AwsResources, EventBridgeSchedules, str],
) -> None:
    _, store, queue_arn = stack
    # A group that does not exist: Scheduler refuses the schedule
    elsewhere = EventBridgeSchedules(
        "no-such-group", role_arn=ROLE, queue_arn=queue_arn, table_name=store.table, region=REGION
    )
    # Scheduler answers ResourceNotFoundException; moto's backend lets a KeyError out.
    with pytest.raises((ClientError, KeyError)):
        create(
            elsewhere,
            new_workspace(WS),
            inbound("e1", "remind me").inbound,
            user_id="alice",
            kind="message",
            text="stretch",
            at=None,
            recurrence=Recurrence(every="day"),
            tz_name="UTC",
            now=datetime(2030, 3, 1, tzinfo=UTC),
        )
    assert elsewhere.count(WS) == 0 and store.list_schedules(WS) == []
