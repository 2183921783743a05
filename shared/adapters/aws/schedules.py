"""Schedules on EventBridge Scheduler: one schedule per item, its target the lane's FIFO queue.

Each schedule's target is the turns queue itself (SqsParameters.MessageGroupId: the session's
lane) and its Input the occurrence's LaneItem, with EventBridge Scheduler's
`<aws.scheduler.scheduled-time>` where the occurrence's time goes: LaneItem derives the event id
from it (shared.models.occurrence_event_id), so every occurrence is its own turn and a retried
delivery of one is the same. Scheduler sends no MessageDeduplicationId, so the queue has
content-based deduplication on (the webhook's explicit ids still win, infra/constructs/lanes.py):
a retry within SQS's 5 minutes is dropped there, a later one by the session's recent event ids.

There is no table: the schedule is the record. Its name is `{workspace hash}.{id}.{user hash}`
(64 characters at most, Scheduler's alphabet), so a workspace's and a user's schedules are a
name-prefix listing, and the Input carries the Schedule itself (`fired.schedule`) for reading
back. A one-time schedule deletes itself after it fires (ActionAfterCompletion DELETE).
Quotas: 1,000,000 schedules per account and region by default, far above the per-user and
per-workspace caps (WorkspaceConfig.schedules).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Final

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.sqs import fifo_id
from shared.models import LaneItem, Schedule
from shared.schedules.timing import at_expression, cron_expression

SCHEDULED_TIME: Final = "<aws.scheduler.scheduled-time>"


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def target_input(schedule: Schedule, item: LaneItem) -> str:
    """The Input Scheduler sends: `item` with the occurrence's time left for Scheduler to fill."""
    doc = json.loads(serde.dumps(item))
    doc["inbound"]["event_id"] = schedule.id
    doc["inbound"]["received_at"] = SCHEDULED_TIME
    doc["enqueued_at"] = SCHEDULED_TIME
    doc["fired"]["at"] = SCHEDULED_TIME
    return json.dumps(doc, separators=(",", ":"))


class EventBridgeSchedules:
    def __init__(
        self,
        group: str,
        *,
        role_arn: str,
        queue_arn: str,
        client: Any | None = None,
        region: str | None = None,
    ) -> None:
        self.group = group
        self.role_arn = role_arn
        self.queue_arn = queue_arn
        self.client = client if client is not None else clients.scheduler(region)

    def create(self, schedule: Schedule, item: LaneItem, first_at: datetime) -> None:
        one_time = schedule.recurrence is None
        self.client.create_schedule(
            Name=f"{_hash(schedule.workspace_id)}.{schedule.id}.{_hash(schedule.user_id)}",
            GroupName=self.group,
            # at() is written in UTC; cron() is read in the user's zone, so 09:00 stays 09:00.
            ScheduleExpression=at_expression(first_at) if one_time else cron_expression(schedule.recurrence),  # type: ignore[arg-type]
            ScheduleExpressionTimezone="UTC" if one_time else schedule.timezone,
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": self.queue_arn,
                "RoleArn": self.role_arn,
                "Input": target_input(schedule, item),
                "SqsParameters": {"MessageGroupId": fifo_id(item.group_id)},
                # An occurrence older than an hour is no longer worth sending.
                "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 20},
            },
            ActionAfterCompletion="DELETE" if one_time else "NONE",
            Description=f"sigil {schedule.kind} ({schedule.workspace_id})"[:512],
        )

    def _names(self, prefix: str) -> list[str]:
        names: list[str] = []
        pages = self.client.get_paginator("list_schedules").paginate(GroupName=self.group, NamePrefix=prefix)
        for page in pages:
            names += [s["Name"] for s in page.get("Schedules", []) if s["Name"].startswith(prefix)]
        return sorted(names)

    def _owned(self, workspace_id: str, user_id: str | None) -> list[str]:
        names = self._names(f"{_hash(workspace_id)}.")
        if user_id is None:
            return names
        return [n for n in names if n.endswith(f".{_hash(user_id)}")]

    def _read(self, name: str) -> Schedule | None:
        try:
            found = self.client.get_schedule(GroupName=self.group, Name=name)
        except self.client.exceptions.ResourceNotFoundException:
            return None
        return Schedule.model_validate(json.loads(found["Target"]["Input"])["fired"]["schedule"])

    def get(self, workspace_id: str, schedule_id: str) -> Schedule | None:
        for name in self._names(f"{_hash(workspace_id)}.{schedule_id}."):
            return self._read(name)
        return None

    def list_schedules(self, workspace_id: str, *, user_id: str | None = None) -> list[Schedule]:
        found = [s for name in self._owned(workspace_id, user_id) if (s := self._read(name)) is not None]
        return sorted(found, key=lambda s: (s.created_at, s.id))

    def count(self, workspace_id: str, *, user_id: str | None = None) -> int:
        return len(self._owned(workspace_id, user_id))

    def cancel(self, workspace_id: str, schedule_id: str) -> bool:
        for name in self._names(f"{_hash(workspace_id)}.{schedule_id}."):
            try:
                self.client.delete_schedule(GroupName=self.group, Name=name)
            except self.client.exceptions.ResourceNotFoundException:
                return False
            return True
        return False
