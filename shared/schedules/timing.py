"""Time zones and recurrences of schedules, for both engines.

A Recurrence is kept to what EventBridge Scheduler's `cron()` and dateutil's `rrule` both say
exactly (every hour at :MM, every day / weekday / given weekdays / month's day at HH:MM), so the
cloud's occurrences and the embedded scheduler's are the same instants. Times are wall-clock
times in the schedule's zone: "every Monday at 09:00" stays 09:00 across a DST change.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule

from shared.errors import BadRequest
from shared.models import WEEKDAYS, Recurrence, Schedule

_RRULE_DAYS = (rrule.MO, rrule.TU, rrule.WE, rrule.TH, rrule.FR, rrule.SA, rrule.SU)


class UnknownTimezone(BadRequest):
    code = "unknown_timezone"


def zone(name: str) -> tzinfo:
    """The IANA zone `name` (UTC needs no tz database); UnknownTimezone for anything else."""
    if name.upper() in {"UTC", "Z", "ETC/UTC"}:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UnknownTimezone(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Paris'") from None


def local_moment(text: str, tz_name: str) -> datetime:
    """'2026-11-30T09:00' in zone `tz_name` (or with its own offset) as an aware datetime."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(f"{text[:40]!r} is not a date and time like 2026-11-30T09:00") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone(tz_name))


def _rule(recurrence: Recurrence, start: datetime) -> rrule.rrule:
    hour, minute = (int(p) for p in recurrence.time.split(":"))
    match recurrence.every:
        case "hour":
            return rrule.rrule(rrule.HOURLY, dtstart=start, byminute=minute, bysecond=0)
        case "day":
            return rrule.rrule(rrule.DAILY, dtstart=start, byhour=hour, byminute=minute, bysecond=0)
        case "weekday":
            days: tuple[rrule.weekday, ...] = _RRULE_DAYS[:5]
        case "week":
            days = tuple(_RRULE_DAYS[WEEKDAYS.index(d)] for d in recurrence.days)
        case "month":
            return rrule.rrule(
                rrule.MONTHLY,
                dtstart=start,
                bymonthday=recurrence.day_of_month,
                byhour=hour,
                byminute=minute,
                bysecond=0,
            )
    return rrule.rrule(rrule.WEEKLY, dtstart=start, byweekday=days, byhour=hour, byminute=minute, bysecond=0)


def next_occurrence(recurrence: Recurrence, tz_name: str, after: datetime) -> datetime:
    """The first occurrence strictly after `after`, in UTC."""
    tz = zone(tz_name)
    # rrule counts in naive wall-clock time, then each instant is placed in the zone: a 09:00
    # stays 09:00 local on both sides of a DST change.
    start = after.astimezone(tz).replace(tzinfo=None, microsecond=0)
    found: datetime | None = _rule(recurrence, start).after(start, inc=False)
    if found is None:  # pragma: no cover - every Recurrence repeats forever
        raise ValueError("the recurrence has no next occurrence")
    return found.replace(tzinfo=tz).astimezone(UTC)


def first_occurrence(schedule: Schedule, now: datetime) -> datetime:
    """When `schedule` fires first: its `at`, or its recurrence's next occurrence after `now`."""
    if schedule.at is not None:
        return schedule.at.astimezone(UTC)
    assert schedule.recurrence is not None
    return next_occurrence(schedule.recurrence, schedule.timezone, now)


def cron_expression(recurrence: Recurrence) -> str:
    """EventBridge Scheduler's cron(minutes hours day-of-month month day-of-week year)."""
    hour, minute = (int(p) for p in recurrence.time.split(":"))
    match recurrence.every:
        case "hour":
            return f"cron({minute} * * * ? *)"
        case "day":
            return f"cron({minute} {hour} * * ? *)"
        case "weekday":
            return f"cron({minute} {hour} ? * MON-FRI *)"
        case "week":
            days = ",".join(d.upper() for d in recurrence.days)
            return f"cron({minute} {hour} ? * {days} *)"
        case "month":
            return f"cron({minute} {hour} {recurrence.day_of_month} * ? *)"


def at_expression(moment: datetime) -> str:
    """EventBridge Scheduler's one-time at(yyyy-mm-ddThh:mm:ss), in UTC."""
    return f"at({moment.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat()})"


def describe(schedule: Schedule) -> str:
    """'at 2026-11-30 09:00 (Europe/Paris)', 'every mon, wed at 09:00 (UTC)'."""
    if schedule.at is not None:
        local = schedule.at.astimezone(zone(schedule.timezone))
        return f"at {local:%Y-%m-%d %H:%M} ({schedule.timezone})"
    r = schedule.recurrence
    assert r is not None
    when = {
        "hour": f"every hour at :{r.time[3:]}",
        "day": f"every day at {r.time}",
        "weekday": f"every weekday at {r.time}",
        "week": f"every {', '.join(r.days)} at {r.time}",
        "month": f"every month on day {r.day_of_month} at {r.time}",
    }[r.every]
    return f"{when} ({schedule.timezone})"
