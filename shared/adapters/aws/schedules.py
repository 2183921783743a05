"""Schedules on EventBridge Scheduler (the engine) with their record in the sessions table.

Each schedule is one Scheduler schedule whose target is the turns queue itself
(SqsParameters.MessageGroupId: the session's lane) and whose Input is the occurrence's LaneItem,
with Scheduler's `<aws.scheduler.scheduled-time>` where the occurrence's time goes: LaneItem
derives the event id from it (shared.models.occurrence_event_id), so every occurrence is its own
turn and a retried delivery of one is the same. Scheduler sends no MessageDeduplicationId, so the
queue has content-based deduplication on (the webhook's explicit ids still win,
infra/constructs/lanes.py): a retry within SQS's 5 minutes is dropped there, a later one by the
session's recent event ids. A one-time schedule deletes itself after it fires
(ActionAfterCompletion DELETE).

The record (pk `WS#{ws}#SCHEDULE`, sk `SCHED#{id}`, the Schedule as `doc`, its user as `user`)
answers the listings and the caps with one Query, where Scheduler's ListSchedules would need a
Resource "*" grant and a read per schedule. A one-time record carries `ttl` an hour after its
moment: DynamoDB removes it later, and the listings skip it from then on.
Quotas: 1,000,000 schedules per account and region by default (Scheduler), far above the per-user
and per-workspace caps (WorkspaceConfig.schedules).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.table import Table, dump_doc, item_key, load_docs, string
from shared.adapters.aws.sqs import fifo_id
from shared.errors import BadRequest
from shared.models import LaneItem, Schedule
from shared.schedules.timing import at_expression, cron_expression

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SCHEDULED_TIME: Final = "<aws.scheduler.scheduled-time>"
# How long a one-time schedule's record outlives its moment (Scheduler retries for an hour).
DONE_AFTER_S: Final = 3600
# Scheduler's limit on a target's Input.
MAX_INPUT_CHARS: Final = 8192


def schedule_name(schedule: Schedule) -> str:
    """Scheduler's name (64 characters of [0-9A-Za-z._-]): the workspace's hash and the id."""
    return f"{hashlib.sha256(schedule.workspace_id.encode()).hexdigest()[:16]}.{schedule.id}"


def target_input(schedule: Schedule, item: LaneItem) -> str:
    """The Input Scheduler sends: `item` with the occurrence's time left for Scheduler to fill."""
    doc = json.loads(serde.dumps(item))
    doc["inbound"]["event_id"] = schedule.id
    doc["inbound"]["received_at"] = SCHEDULED_TIME
    doc["enqueued_at"] = SCHEDULED_TIME
    doc["fired"]["at"] = SCHEDULED_TIME
    return json.dumps(doc, separators=(",", ":"))


def _pk(workspace_id: str) -> str:
    return f"WS#{workspace_id}#SCHEDULE"


class EventBridgeSchedules(Table):
    def __init__(
        self,
        group: str,
        *,
        role_arn: str,
        queue_arn: str | Callable[[str], str],
        table_name: str,
        scheduler: Any | None = None,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(table_name, client, region)
        self.group = group
        self.role_arn = role_arn
        # The lane queue's ARN, or a function of the lane (group id) to its queue's ARN where the
        # lanes are sharded over several queues: a schedule targets its session's own queue.
        self.target_of: Callable[[str], str] = queue_arn if callable(queue_arn) else (lambda _: queue_arn)
        self.scheduler = scheduler if scheduler is not None else clients.scheduler(region)
        self.clock = clock

    def create(self, schedule: Schedule, item: LaneItem, first_at: datetime) -> None:
        key = item_key(_pk(schedule.workspace_id), f"SCHED#{schedule.id}")
        record = key | {"doc": dump_doc(schedule), "user": string(schedule.user_id)}
        if schedule.recurrence is None:
            record["ttl"] = {"N": str(int(first_at.timestamp()) + DONE_AFTER_S)}
            expression, zone = at_expression(first_at), "UTC"
        else:
            # cron() is read in the user's zone, so 09:00 stays 09:00 across DST.
            expression, zone = cron_expression(schedule.recurrence), schedule.timezone
        body = target_input(schedule, item)
        if len(body) > MAX_INPUT_CHARS:
            raise BadRequest(f"the schedule is too large for EventBridge Scheduler ({len(body)} characters)")
        # The record first: a schedule that fires always has one; if Scheduler refuses, it goes.
        self.client.put_item(TableName=self.table, Item=record)
        try:
            self._create(schedule, item, body, expression, zone)
        except Exception:
            self.client.delete_item(TableName=self.table, Key=key)
            raise

    def _create(self, schedule: Schedule, item: LaneItem, body: str, expression: str, zone: str) -> None:
        self.scheduler.create_schedule(
            Name=schedule_name(schedule),
            GroupName=self.group,
            ScheduleExpression=expression,
            ScheduleExpressionTimezone=zone,
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": self.target_of(item.group_id),
                "RoleArn": self.role_arn,
                "Input": body,
                "SqsParameters": {"MessageGroupId": fifo_id(item.group_id)},
                # An occurrence more than an hour late is no longer worth sending.
                "RetryPolicy": {"MaximumEventAgeInSeconds": DONE_AFTER_S, "MaximumRetryAttempts": 20},
            },
            ActionAfterCompletion="DELETE" if schedule.recurrence is None else "NONE",
            Description=f"sigil {schedule.kind} in workspace {schedule.workspace_id}"[:512],
        )

    def get(self, workspace_id: str, schedule_id: str) -> Schedule | None:
        item = self.client.get_item(
            TableName=self.table, Key=item_key(_pk(workspace_id), f"SCHED#{schedule_id}"), ConsistentRead=True
        ).get("Item")
        if item is None or self._done(item):
            return None
        return serde.loads(Schedule, item["doc"]["S"])

    def _live(self, workspace_id: str, user_id: str | None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": string(_pk(workspace_id))},
            "ConsistentRead": True,
        }
        if user_id is not None:
            params["FilterExpression"] = "#u = :u"
            params["ExpressionAttributeNames"] = {"#u": "user"}
            params["ExpressionAttributeValues"][":u"] = string(user_id)
        return [item for item in self.query(**params) if not self._done(item)]

    def _done(self, item: dict[str, Any]) -> bool:
        # DynamoDB removes an expired item within days; until then it is skipped here.
        return "ttl" in item and int(item["ttl"]["N"]) <= self.clock()

    def list_schedules(self, workspace_id: str, *, user_id: str | None = None) -> list[Schedule]:
        found = load_docs(self._live(workspace_id, user_id), Schedule)
        return sorted(found, key=lambda s: (s.created_at, s.id))

    def count(self, workspace_id: str, *, user_id: str | None = None) -> int:
        return len(self._live(workspace_id, user_id))

    def cancel(self, workspace_id: str, schedule_id: str) -> bool:
        found = self.get(workspace_id, schedule_id)
        if found is None:
            return False
        # A one-time schedule that fired has deleted itself.
        with contextlib.suppress(self.scheduler.exceptions.ResourceNotFoundException):
            self.scheduler.delete_schedule(GroupName=self.group, Name=schedule_name(found))
        self.client.delete_item(TableName=self.table, Key=item_key(_pk(workspace_id), f"SCHED#{schedule_id}"))
        return True
