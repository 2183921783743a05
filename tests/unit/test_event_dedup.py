"""The session's memory of committed event ids: a day of them, bounded, and older documents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared import serde
from shared.agent.commit import EVENT_ID_TTL, MAX_RECENT_EVENT_IDS, recent_events
from shared.models import Session

T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


def epoch(dt: datetime) -> int:
    return int(dt.timestamp())


def test_an_event_is_added_with_its_time_and_a_day_old_one_dropped() -> None:
    session = Session(
        id="s1",
        workspace_id="w1",
        recent_event_ids=["old", "edge", "new"],
        recent_event_times=[epoch(T0 - timedelta(hours=25)), epoch(T0 - EVENT_ID_TTL), epoch(T0)],
    )
    ids, times = recent_events(session, "next", T0)
    # Exactly a day old is still kept: the TTL is a lower bound
    assert ids == ["edge", "new", "next"]
    assert times == [epoch(T0 - EVENT_ID_TTL), epoch(T0), epoch(T0)]


def test_at_most_the_newest_ids_are_kept_whatever_the_pace() -> None:
    n = MAX_RECENT_EVENT_IDS
    session = Session(
        id="s1",
        workspace_id="w1",
        recent_event_ids=[f"e{i}" for i in range(n)],
        recent_event_times=[epoch(T0)] * n,
    )
    ids, times = recent_events(session, "last", T0)
    assert len(ids) == len(times) == n
    assert ids[0] == "e1" and ids[-1] == "last"


def test_a_document_from_before_the_times_were_kept_counts_its_ids_as_seen_at_its_update() -> None:
    # Stored by the previous version: ids only
    legacy = Session(id="s1", workspace_id="w1", updated_at=T0).model_dump(mode="json")
    legacy["recent_event_ids"] = ["e1", "e2"]
    del legacy["recent_event_times"]
    session: Session = serde.loads(Session, serde.dumps(legacy))
    assert session.recent_event_times == [epoch(T0), epoch(T0)]
    assert serde.loads(Session, serde.dumps(session)) == session
    # They expire a day after that update
    assert recent_events(session, "e3", T0 + timedelta(hours=23))[0] == ["e1", "e2", "e3"]
    assert recent_events(session, "e3", T0 + timedelta(hours=25))[0] == ["e3"]


def test_more_times_than_ids_is_a_broken_document() -> None:
    with pytest.raises(ValidationError):
        Session(id="s1", workspace_id="w1", recent_event_ids=["e1"], recent_event_times=[1, 2])
