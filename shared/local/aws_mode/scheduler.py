"""EventBridge Scheduler's stand-in: fires moto's schedules of the group into their SQS targets.

moto stores schedules (create, get, list, delete) but never fires them. Once a second this looks
at the group's schedules and, for each due occurrence, does what Scheduler does with an SQS
target (docs/schedules.md): sends the target's Input, `<aws.scheduler.scheduled-time>` filled in,
to the target queue with SqsParameters.MessageGroupId; then deletes a one-time schedule whose
ActionAfterCompletion is DELETE. Scheduler sends no deduplication id and the turns queue
deduplicates by content; here the content's SHA-256 is passed as the id, which is what SQS
derives itself, because moto numbers (SequenceNumber) only a FIFO message sent with an id.

The last fired occurrence of each schedule is remembered in memory: a restart of the mode starts
from an empty moto. Only the expressions Sigil writes are understood (`at(...)`, and `cron(...)`
with numbers, lists, ranges, `*` and `?`); another schedule is logged once and left alone.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from dateutil import rrule

from shared.adapters.aws.schedules import SCHEDULED_TIME
from shared.schedules.timing import zone

log = logging.getLogger("sigil.aws_mode")

_DAYS: Final = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_AT = re.compile(r"^at\((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\)$")
_CRON = re.compile(r"^cron\((.+)\)$")
_NEVER: Final = datetime(1970, 1, 1, tzinfo=UTC)
# Scheduler's default RetryPolicy.MaximumEventAgeInSeconds (a day).
DEFAULT_MAX_AGE_S: Final = 86_400


class UnsupportedExpression(ValueError):
    pass


def _values(field: str, names: tuple[str, ...] = ()) -> list[int] | None:
    """A cron field's values (None: any). Day names count from 0 (MON) as rrule's weekdays do."""
    if field in ("*", "?"):
        return None

    def one(text: str) -> int:
        return names.index(text.upper()) if names and not text.isdigit() else int(text)

    found: list[int] = []
    for part in field.split(","):
        if not re.fullmatch(r"[0-9A-Za-z]+(-[0-9A-Za-z]+)?", part):
            raise UnsupportedExpression(f"cron field {field!r}")
        low, _, high = part.partition("-")
        try:
            start, end = one(low), one(high or low)
        except ValueError:
            raise UnsupportedExpression(f"cron field {field!r}") from None
        found.extend(range(start, end + 1))
    return found


def _cron_rule(fields: str, start: datetime) -> rrule.rrule:
    """Scheduler's cron(minutes hours day-of-month month day-of-week year) as an rrule in
    naive wall-clock time from `start` (as shared.schedules.timing counts)."""
    parts = fields.split()
    if len(parts) != 6 or parts[5] != "*":
        raise UnsupportedExpression(f"cron({fields})")
    minutes, hours, days, months = (_values(p) for p in parts[:4])
    weekdays = _values(parts[4], _DAYS)
    return rrule.rrule(
        rrule.MINUTELY,
        dtstart=start,
        byminute=minutes,
        byhour=hours,
        bymonthday=days,
        bymonth=months,
        byweekday=weekdays,
        bysecond=0,
    )


def next_occurrence(schedule: dict[str, Any], after: datetime) -> datetime | None:
    """The first occurrence of `schedule` (GetSchedule's answer) strictly after `after`, in UTC;
    None when it has none (a one-time schedule past its moment)."""
    expression: str = schedule["ScheduleExpression"]
    tz = zone(schedule.get("ScheduleExpressionTimezone") or "UTC")
    if at := _AT.match(expression):
        moment = datetime.fromisoformat(at.group(1)).replace(tzinfo=tz).astimezone(UTC)
        return moment if moment > after else None
    if cron := _CRON.match(expression):
        # rrule counts in the zone's wall-clock time; each instant is then placed in the zone, so
        # 09:00 stays 09:00 across a DST change, as Scheduler reads cron() with the zone.
        start = after.astimezone(tz).replace(tzinfo=None, microsecond=0)
        found: datetime | None = _cron_rule(cron.group(1), start).after(start, inc=False)
        return None if found is None else found.replace(tzinfo=tz).astimezone(UTC)
    raise UnsupportedExpression(expression)


@dataclass
class _Known:
    modified: Any  # LastModificationDate: a changed schedule is read again
    schedule: dict[str, Any]
    last: datetime  # the last occurrence fired, or when the schedule was created
    # The occurrence after `last`, worked out once (None: none left); `last` itself until then.
    upcoming: datetime | None = None
    worked_out: bool = False


class SchedulerStandIn:
    """One pass a second over the group's schedules (run by a PollerThread)."""

    def __init__(
        self,
        scheduler: Any,
        sqs: Any,
        *,
        group: str,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scheduler = scheduler
        self.sqs = sqs
        self.group = group
        self.interval_s = interval_s
        self.clock = clock
        self.next_pass = 0.0
        self._known: dict[str, _Known] = {}
        self._queue_urls: dict[str, str] = {}
        self._refused: set[str] = set()

    def poll_once(self) -> bool:
        """Fires what is due; False (idle) between passes and when nothing fired."""
        if time.monotonic() < self.next_pass:
            return False
        self.next_pass = time.monotonic() + self.interval_s
        return self.fire_due() > 0

    def fire_due(self) -> int:
        now = datetime.fromtimestamp(self.clock(), UTC)
        summaries = self.scheduler.list_schedules(GroupName=self.group, State="ENABLED")["Schedules"]
        names = {s["Name"] for s in summaries}
        for gone in set(self._known) - names:
            del self._known[gone]
        fired = 0
        for summary in summaries:
            name = summary["Name"]
            known = self._known.get(name)
            if known is None or known.modified != summary.get("LastModificationDate"):
                schedule = self.scheduler.get_schedule(GroupName=self.group, Name=name)
                # An at() already past when it is seen fires at once; a cron() first fires at its
                # next occurrence after its creation.
                created = (schedule.get("CreationDate") or now).astimezone(UTC)
                if known is not None:
                    last = known.last
                elif _AT.match(schedule["ScheduleExpression"]):
                    last = _NEVER  # its one moment, whenever it was created
                else:
                    last = min(created, now)
                known = self._known[name] = _Known(summary.get("LastModificationDate"), schedule, last)
            fired += self._fire(name, known, now)
        return fired

    def _fire(self, name: str, known: _Known, now: datetime) -> int:
        schedule = known.schedule
        if not known.worked_out:
            try:
                known.upcoming = next_occurrence(schedule, known.last)
            except UnsupportedExpression as exc:
                if name not in self._refused:
                    self._refused.add(name)
                    log.warning("schedule left alone: the stand-in does not read its expression %s", exc)
                return 0
            known.worked_out = True
        moment = known.upcoming
        if moment is None or moment > now:
            return 0
        max_age = schedule["Target"].get("RetryPolicy", {}).get("MaximumEventAgeInSeconds", DEFAULT_MAX_AGE_S)
        if (now - moment).total_seconds() > max_age:
            # Missed while the mode was paused (a sleeping laptop): Scheduler would have given up
            # on it, so it is dropped, and the next one worked out on the next pass.
            log.warning("scheduled occurrence too old to send; dropped", extra={"schedule": name})
            self._done(name, known, moment)
            return 0
        # Sent before the occurrence is marked: a failed send raises and is tried again next pass.
        self._send(schedule["Target"], moment)
        self._done(name, known, moment)
        return 1

    def _done(self, name: str, known: _Known, moment: datetime) -> None:
        known.last, known.worked_out = moment, False
        schedule = known.schedule
        if schedule.get("ActionAfterCompletion") == "DELETE" and _AT.match(schedule["ScheduleExpression"]):
            self.scheduler.delete_schedule(GroupName=self.group, Name=name)
            del self._known[name]

    def _send(self, target: dict[str, Any], moment: datetime) -> None:
        body = target.get("Input", "").replace(SCHEDULED_TIME, moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
        params: dict[str, Any] = {"QueueUrl": self._queue_url(target["Arn"]), "MessageBody": body}
        group = target.get("SqsParameters", {}).get("MessageGroupId")
        if group is not None:
            params["MessageGroupId"] = group
            params["MessageDeduplicationId"] = hashlib.sha256(body.encode()).hexdigest()
        self.sqs.send_message(**params)

    def _queue_url(self, arn: str) -> str:
        if arn not in self._queue_urls:
            account, name = arn.split(":")[4:6]
            url: str = self.sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
            self._queue_urls[arn] = url
        return self._queue_urls[arn]
