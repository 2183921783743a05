"""resolve_time: the time a memory query names, as a window against the asking turn's time.

A table of expressions at fixed times (month ends, a year's turn, a leap day, "in May" asked in
March), the query's words left for the search, time zones, and hypothesis properties over any
time of asking.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.memory.when import TimeFilter, boost_window, resolve_time

WED = datetime(2026, 3, 11, 15, 0, tzinfo=UTC)  # a Wednesday in March
NEW_YEAR = datetime(2026, 1, 2, 9, 0, tzinfo=UTC)  # a Friday, two days into a year
MONTH_END = datetime(2025, 12, 31, 23, 30, tzinfo=UTC)  # a Wednesday, the year's last half hour
LEAP = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)  # the day after 29 February


def d(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


# (query, now, start, end): the window [start, end), None for an open end.
TABLE = [
    ("yesterday", WED, d(2026, 3, 10), d(2026, 3, 11)),
    ("what did I say today", WED, d(2026, 3, 11), d(2026, 3, 12)),
    ("this morning", WED, d(2026, 3, 11), d(2026, 3, 12)),
    ("the day before yesterday", WED, d(2026, 3, 9), d(2026, 3, 10)),
    ("last night", WED, d(2026, 3, 10, 18), d(2026, 3, 11, 6)),
    ("last week", WED, d(2026, 3, 2), d(2026, 3, 9)),
    ("this week", WED, d(2026, 3, 9), d(2026, 3, 16)),
    ("last month", WED, d(2026, 2, 1), d(2026, 3, 1)),
    ("this month", WED, d(2026, 3, 1), d(2026, 4, 1)),
    ("last year", WED, d(2025, 1, 1), d(2026, 1, 1)),
    ("this year", WED, d(2026, 1, 1), d(2027, 1, 1)),
    ("3 days ago", WED, d(2026, 3, 8), d(2026, 3, 9)),
    ("two weeks ago", WED, d(2026, 2, 23), d(2026, 3, 2)),
    ("a month ago", WED, d(2026, 2, 1), d(2026, 3, 1)),
    ("a couple of years ago", WED, d(2024, 1, 1), d(2025, 1, 1)),
    ("in the last 3 days", WED, d(2026, 3, 8, 15), d(2026, 3, 11, 15)),
    ("the past week", WED, d(2026, 3, 4, 15), d(2026, 3, 11, 15)),
    # "in May" asked in March: the latest May not after now, last year's.
    ("what did we plan in May", WED, d(2025, 5, 1), d(2025, 6, 1)),
    ("in March", WED, d(2026, 3, 1), d(2026, 4, 1)),
    ("during sept", WED, d(2025, 9, 1), d(2025, 10, 1)),
    ("last May", WED, d(2025, 5, 1), d(2025, 6, 1)),
    ("last March", WED, d(2025, 3, 1), d(2025, 4, 1)),
    ("in May 2023", WED, d(2023, 5, 1), d(2023, 6, 1)),
    ("in 2023", WED, d(2023, 1, 1), d(2024, 1, 1)),
    ("on 8 May", WED, d(2025, 5, 8), d(2025, 5, 9)),
    ("on the 8th of May", WED, d(2025, 5, 8), d(2025, 5, 9)),
    ("March 10th", WED, d(2026, 3, 10), d(2026, 3, 11)),
    ("March 12", WED, d(2025, 3, 12), d(2025, 3, 13)),  # tomorrow's date: last year's
    ("on May 8, 2024", WED, d(2024, 5, 8), d(2024, 5, 9)),
    ("on 2026-02-28", WED, d(2026, 2, 28), d(2026, 3, 1)),
    ("before May", WED, None, d(2025, 5, 1)),
    ("after 3 March", WED, d(2026, 3, 4), None),
    ("since January", WED, d(2026, 1, 1), None),
    ("until last week", WED, None, d(2026, 3, 9)),
    ("since Monday", WED, d(2026, 3, 9), None),
    ("since this Monday", WED, d(2026, 3, 9), None),
    ("on Tuesday", WED, d(2026, 3, 10), d(2026, 3, 11)),
    ("on Wednesday", WED, d(2026, 3, 4), d(2026, 3, 5)),  # asked on a Wednesday: a week ago
    ("over the weekend", WED, d(2026, 3, 7), d(2026, 3, 9)),
    # The year's turn: last week, last month and "in December" are last year's.
    ("last week", NEW_YEAR, d(2025, 12, 22), d(2025, 12, 29)),
    ("this week", NEW_YEAR, d(2025, 12, 29), d(2026, 1, 5)),
    ("last month", NEW_YEAR, d(2025, 12, 1), d(2026, 1, 1)),
    ("in December", NEW_YEAR, d(2025, 12, 1), d(2026, 1, 1)),
    ("yesterday", NEW_YEAR, d(2026, 1, 1), d(2026, 1, 2)),
    ("3 days ago", NEW_YEAR, d(2025, 12, 30), d(2025, 12, 31)),
    ("two months ago", NEW_YEAR, d(2025, 11, 1), d(2025, 12, 1)),
    ("on 31 December", NEW_YEAR, d(2025, 12, 31), d(2026, 1, 1)),
    # A month's and a year's last half hour.
    ("today", MONTH_END, d(2025, 12, 31), d(2026, 1, 1)),
    ("this month", MONTH_END, d(2025, 12, 1), d(2026, 1, 1)),
    ("a month ago", MONTH_END, d(2025, 11, 1), d(2025, 12, 1)),
    ("in December", MONTH_END, d(2025, 12, 1), d(2026, 1, 1)),
    # 29 February: the latest leap year's.
    ("on 29 February", LEAP, d(2024, 2, 29), d(2024, 3, 1)),
    ("on 29 February", WED, d(2024, 2, 29), d(2024, 3, 1)),
    ("last month", LEAP, d(2024, 2, 1), d(2024, 3, 1)),
]


@pytest.mark.parametrize(("query", "now", "start", "end"), TABLE)
def test_each_expression_resolves_to_its_window(
    query: str, now: datetime, start: datetime | None, end: datetime | None
) -> None:
    found = resolve_time(query, now)
    assert found is not None, query
    assert (found.start, found.end) == (start, end)
    # No word of saying in these: the time is when something happened, so it boosts.
    assert found.mode == ("filter" if " say " in query else "boost")


@pytest.mark.parametrize(
    ("query", "mode"),
    [
        ("what did I say last week", "filter"),
        ("what did we talk about in May", "filter"),
        ("what did Ada tell me yesterday", "filter"),
        ("what I mentioned on 8 May", "filter"),
        ("what did I buy last week", "boost"),
        ("where did we go in May", "boost"),
        ("what did I eat before the move", "filter"),  # an event anchor bounds by the event
    ],
)
def test_a_question_about_saying_filters_and_one_about_happening_boosts(query: str, mode: str) -> None:
    found = resolve_time(query, WED)
    assert found is not None and found.mode == mode


@pytest.mark.parametrize(
    ("query", "phrase", "rest"),
    [
        ("what did I say last week?", "last week", "what did I say?"),
        ("In May, what did Ada paint", "In May", "what did Ada paint"),
        ("the dentist appointment on 8 May 2025", "on 8 May 2025", "the dentist appointment"),
        ("Yesterday", "Yesterday", "Yesterday"),  # nothing else: searched whole
        (
            "what we decided two weeks ago about the budget",
            "two weeks ago",
            "what we decided about the budget",
        ),
    ],
)
def test_the_phrase_leaves_the_query_and_the_rest_is_searched(query: str, phrase: str, rest: str) -> None:
    found = resolve_time(query, WED)
    assert found is not None
    assert (found.phrase, found.query) == (phrase, rest)


@pytest.mark.parametrize(
    "query",
    [
        "I may go to Paris",  # "may" the verb
        "what is my favourite drink",
        "the last time we spoke",
        "march on",  # "march" without a relation or a day
        "I have 2023 reasons",  # a number without "in"
        "the week was long",
    ],
)
def test_no_time_named_means_no_filter(query: str) -> None:
    assert resolve_time(query, WED) is None


@pytest.mark.parametrize("query", ["anything recently?", "what have I been up to lately", "the other day"])
def test_vague_times_only_boost(query: str) -> None:
    found = resolve_time(query, WED)
    assert found is not None and found.mode == "boost"
    assert found.start is not None and found.start < WED
    assert found.end is None or found.end <= WED


@pytest.mark.parametrize(
    "query",
    [
        "When did I go to Paris?",
        "what date was the wedding",
        "how long ago did we move",
        "since when do you know",
    ],
)
def test_when_questions_ask_for_dates_without_a_window(query: str) -> None:
    found = resolve_time(query, WED)
    assert found is not None
    assert (found.mode, found.start, found.end, found.query) == ("when", None, None, query)


@pytest.mark.parametrize(
    ("query", "anchor", "relation", "rest"),
    [
        ("what did I eat before the move?", "the move", "before", "what did I eat?"),
        ("After my trip to Paris, what changed", "my trip to Paris", "after", "what changed"),
        ("since the wedding and the party", "the wedding", "after", "and the party"),
    ],
)
def test_event_anchors_are_left_for_a_first_search(query: str, anchor: str, relation: str, rest: str) -> None:
    found = resolve_time(query, WED)
    assert found is not None
    assert (found.anchor, found.relation, found.query) == (anchor, relation, rest)
    assert found.start is None and found.end is None  # bound once the anchor is found


def test_a_date_after_before_is_a_date_not_an_event() -> None:
    found = resolve_time("before the 8th of May", WED)
    assert found is not None and found.anchor is None
    assert found.end == d(2025, 5, 8)


def test_days_start_at_midnight_in_the_time_zone_asked() -> None:
    paris = ZoneInfo("Europe/Paris")
    # 00:30 in Paris on 11 March is still 10 March in UTC.
    now = datetime(2026, 3, 10, 23, 30, tzinfo=UTC)
    found = resolve_time("yesterday", now, paris)
    assert found is not None
    assert found.start == datetime(2026, 3, 10, tzinfo=paris).astimezone(UTC) == d(2026, 3, 9, 23)
    assert found.end == d(2026, 3, 10, 23)
    assert resolve_time("yesterday", now) == TimeFilter(
        start=d(2026, 3, 9), end=d(2026, 3, 10), mode="boost", phrase="yesterday", query="yesterday"
    )


def test_the_window_says_what_it_was_taken_as() -> None:
    found = resolve_time("last week", WED)
    assert found is not None
    assert found.model_copy(update={"applied": "filter"}).describe() == (
        '"last week": said 2026-03-02 to 2026-03-08, only those'
    )
    assert "dates shown" in TimeFilter(start=None, end=None, mode="when", phrase="", query="x").describe()


# ---------------------------------------------------------------- properties

_nows = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2098, 12, 31), timezones=st.just(UTC))
_past = st.sampled_from(
    [
        "yesterday",
        "last week",
        "last month",
        "last year",
        "in May",
        "in December",
        "on 8 May",
        "on 29 February",
        "3 days ago",
        "two weeks ago",
        "a month ago",
        "on Monday",
        "last weekend",
        "last night",
        "the past week",
        "in the last 10 days",
        "last May",
    ]
)
_zones = st.sampled_from(
    [UTC, ZoneInfo("Europe/Paris"), ZoneInfo("America/Los_Angeles"), ZoneInfo("Asia/Tokyo")]
)


@settings(max_examples=300, deadline=None)
@given(now=_nows, phrase=_past, zone=_zones)
def test_a_past_time_is_a_nonempty_window_that_starts_before_now(
    now: datetime, phrase: str, zone: ZoneInfo
) -> None:
    found = resolve_time(f"what did we say {phrase}?", now, zone)
    assert found is not None and found.mode == "filter"
    assert found.start is not None and found.end is not None
    assert found.start < found.end and found.start <= now
    # Over by now's day at most, or a month named while it is on ("in May" asked in May).
    assert found.end <= now + timedelta(days=1) or (phrase.startswith("in ") and now < found.end)
    assert found.query == "what did we say?"
    # Deterministic: the same question at the same time is the same window.
    assert resolve_time(f"what did we say {phrase}?", now, zone) == found


@settings(max_examples=200, deadline=None)
@given(now=_nows, zone=_zones)
def test_calendar_windows_tile_time(now: datetime, zone: ZoneInfo) -> None:
    """Yesterday ends where today starts, last week where this week starts, last month where this
    month starts, and "before X" ends where X starts while "after X" starts where X ends."""
    pairs = [
        ("yesterday", "today"),
        ("last week", "this week"),
        ("last month", "this month"),
        ("last year", "this year"),
    ]
    for earlier, later in pairs:
        a, b = resolve_time(earlier, now, zone), resolve_time(later, now, zone)
        assert a is not None and b is not None
        assert a.end == b.start and b.start is not None and b.start <= now
        assert b.end is not None and now < b.end
    month = resolve_time("in May", now, zone)
    before, after = resolve_time("before May", now, zone), resolve_time("after May", now, zone)
    assert month is not None and before is not None and after is not None
    assert (before.start, before.end) == (None, month.start)
    assert (after.start, after.end) == (month.end, None)


def test_boosting_puts_the_window_first_and_adds_what_only_the_filter_found() -> None:
    from shared.memory.search import MemoryHit

    def hit(i: str, score: float, at: datetime) -> MemoryHit:
        return MemoryHit(
            id=i, tier="message", text=i, score=score, session_id="s", created_at=at, metadata={}
        )

    window = TimeFilter(start=d(2026, 3, 2), end=d(2026, 3, 9), mode="filter", phrase="last week", query="x")
    wide = [
        hit("strong-old", 1.0, d(2026, 1, 5)),
        hit("weak-inside", 0.6, d(2026, 3, 4)),
        hit("old", 0.3, d(2025, 1, 1)),
    ]
    only_filtered = [hit("unranked-inside", 0.9, d(2026, 3, 3)), hit("weak-inside", 0.7, d(2026, 3, 4))]
    ranked = boost_window(wide, only_filtered, window, 0.5)
    assert [(h.id, h.score) for h in ranked] == [
        ("weak-inside", 1.1),  # 0.6 + 0.5 x 1.0
        ("strong-old", 1.0),
        ("unranked-inside", 0.5),  # relevance 0 on the wide scale, plus the boost
        ("old", 0.3),
    ]


def test_a_pasted_text_is_not_read_for_a_time() -> None:
    assert resolve_time("last week " + "word " * 100, WED) is None  # over MAX_QUERY_CHARS
    assert resolve_time("what I bought last week", WED) is not None


def test_an_anchor_keeps_the_query_s_own_spacing_and_case() -> None:
    found = resolve_time("what did I eat before the  Big Move, really", WED)
    assert found is not None
    assert (found.anchor, found.phrase, found.query) == (
        "the  Big Move",
        "before the  Big Move",
        "what did I eat, really",
    )
