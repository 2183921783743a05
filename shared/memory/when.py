"""Time-aware memory search: the time a query names, as a window over when memories were said.

Every index document carries `created_at`, the time its memory was said (a Tier-1 message: the
inbound's `received_at`; a summary: its last message's time; a fact: when it was last stated),
which both index adapters filter on (IndexQuery.created_from / created_before). This module reads the
time a question names ("last week", "in May", "before the move", "when did ...") against the
asking turn's clock, and runs the search with it (`timed_search`, which MemorySearch.search hands
over to when it is given `now`).

`resolve_time(query, now, tz)` is deterministic: one phrase per query (the leftmost, longest
match), resolved in the time zone `tz` (a day starts at local midnight, a week on Monday), into
a half-open window [start, end) in UTC, either end open ("before May": no start). The query's
other words are what BM25 and the k-NN half search for; a query of nothing but a time phrase is
searched whole. Calendar words mean calendar spans ("last week" is the Monday-to-Sunday week
before this one, "last month" the previous calendar month); "past"/"last N" mean a rolling span
up to now ("the past week" is the last 7 days). A month or a day without a year is the latest
one not after now ("in May", asked in March 2026, is May 2025).

Modes: a question about what was said at a time ("what did I say last week", "what did we talk
about in May": a word of saying, _SPEECH) **filters** (only memories said in the window), unless
that leaves fewer than k hits: then the search is run again without the window and the memories
inside it are **boosted** (TIME_BOOST x the best score, as the author boost is), so a time
remembered a little wrong ("last week" for something said nine days ago) still finds it, after
what was said in the window. Any other time names when something happened ("what did I buy last
week"), which may have been told of later ("I bought it last week", said today): it only boosts,
as a vague time does ("recently", "lately", "the other day"). An event anchor filters. "When did ..." names no
time: nothing is filtered or boosted (recency says nothing about when a thing happened), and the
hits show their dates, which answer it.

Event anchors ("before the move", "after my trip", "since the wedding"): the window's bound is
the time of the event, found by a first search for its words (determiner dropped) with the same
scope and tiers over what was said before now, by BM25 (k-NN always has a nearest hit, even for
an event nobody spoke of; memory_semantic's vector-only search goes by vectors). Its best hit's
time is the bound: "before" ends the window there (the anchor excluded), "after"/"since" start
it there. No hit: the query is searched whole, without a window, and the outcome says the anchor
was not found.
"""

from __future__ import annotations

import calendar
import functools
import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from shared.memory.search import MemoryHit, SearchOutcome
    from shared.models import MemoryTier, RecallScope

TimeMode = Literal["filter", "boost", "when"]

# In-window hits of a boosted search gain this share of the best score. Half, not the author
# boost's quarter: the person named the time, so what was said then should lead unless something
# outside it matches the words far better.
TIME_BOOST = 0.5
# A vague time's search ranks this many times k records before the boost re-orders and cuts them,
# so a memory of the window just past the k-th can move up. After a filtered search the window's
# memories are all in hand (it found fewer than k, so all there are), and the wide search asks
# for k: records past it cost their documents' reads (~3 ms at 100k for 4 x k) and add nothing.
VAGUE_DEPTH = 2
RECENT_DAYS = 14  # "recently", "lately"
OTHER_DAY = (2, 10)  # "the other day": between 10 and 2 days ago

_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9,
    "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12,
    "dec": 12,
}  # fmt: skip
_WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5}
_WEEKDAYS["sunday"] = 6
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
    "couple of": 2, "few": 3,
}  # fmt: skip
_UNIT = r"(?P<unit>day|week|month|year)s?"
_N = (
    r"(?P<n>\d{1,3}|a couple of|couple of|a few|few|an|a|one|two|three|four|five|six|seven|eight"
    r"|nine|ten|eleven|twelve)"
)
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_MONTH2 = _MONTH.replace("?P<month>", "?P<month2>")
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_DAY2 = _DAY.replace("?P<day>", "?P<day2>")
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_WEEKDAY = r"(?P<weekday>" + "|".join(_WEEKDAYS) + r")"

# What a point in time can be (each a span of local time), and whether it needs a relation word
# before it ("in May": "may" alone is a verb; "in 2023": a bare number is no year).
_SPANS = [
    ("iso", r"(?P<iso>(?:19|20)\d\d-[01]\d-[0-3]\d)", False),
    ("day_month", _DAY + r"(?: of)? " + _MONTH + r"(?:,? " + _YEAR + r")?", False),
    ("month_day", _MONTH + r" " + _DAY + r"(?:,? " + _YEAR + r")?", False),
    ("day_before_yesterday", r"the day before yesterday", False),
    ("yesterday", r"yesterday", False),
    ("today", r"(?:earlier )?today|this morning|this afternoon|this evening|tonight", False),
    ("last_night", r"last night", False),
    ("ago", _N + r" " + _UNIT + r" ago", False),
    ("rolling", r"(?:past|last) " + _N.replace("|an|a|", "|") + r" " + _UNIT, False),
    ("past", r"past (?P<unit>day|week|month|year)", False),
    ("weekend", r"(?P<which>last|this|over the|at the|the) weekend", False),
    ("last_unit", r"(?:last|previous) (?P<unit>week|month|year)", False),
    ("this_unit", r"this (?P<unit>week|month|year)", False),
    ("weekday", r"(?:(?:last|this past|this) )?" + _WEEKDAY, False),
    ("last_month_name", r"last " + _MONTH, False),
    ("month_year", _MONTH + r",? " + _YEAR, False),
    ("month", _MONTH, True),
    ("year", _YEAR, True),
    ("the_year", r"the year " + _YEAR, False),
]
_VAGUE = r"(?P<vague>recently|lately|the other day|these days|of late)"
# Words of saying: a question with one asks what was said at the time it names ("what did I say
# last week"), which the window filters exactly.
_SPEECH = re.compile(
    r"\b(?:say|says|said|tell|tells|told|talk|talks|talked|talking|discuss|discussed|mention|mentioned"
    r"|ask|asked|write|wrote|chat|chatted|spoke|speak|message|messaged|texted|remind|reminded)\b"
)
_WHEN = re.compile(
    r"\b(?:when (?:did|was|were|do|does|is|are|had|have|has|will|would|could)"
    r"|what (?:day|date|time|year|month)|how long ago|since when)\b"
)
# Relations that turn a span into an open window, or two spans into one.
_RELATION = r"(?P<rel>before|after|since|until|till|by|from|during|in|on|at)"
_DETERMINERS = r"(?:the|my|our|his|her|their|your|that|this)"
_ANCHOR = re.compile(
    r"\b(?P<rel>before|after|since)\s+(?P<anchor>" + _DETERMINERS + r"\s+[^\W\d_][\w'-]*(?:\s+[\w'-]+){0,3})"
)
_CLAUSE_END = re.compile(r"[?.!,;:]")
# Words that end an anchor phrase: they start a new clause ("before the move and after ...").
_ANCHOR_STOP = frozenset(
    {
        "and", "or", "but", "when", "did", "do", "does", "was", "were", "is", "are", "i", "you",
        "we", "he", "she", "they", "what", "who", "why", "how", "where", "which", "that", "ago",
    }
)  # fmt: skip


# Past this many characters a query is a pasted text, not a question about a time: not resolved
# (the patterns cost ~10 ms per 1,000 characters).
MAX_QUERY_CHARS = 500
# A word every time phrase has (or a digit): most queries have none and skip the patterns.
_TRIGGER_WORDS = (
    "ago", "yesterday", "today", "tonight", "morning", "afternoon", "evening", "night", "week",
    "weekend", "month", "year", "last", "past", "this", "previous", "since", "before", "after",
    "until", "till", "recently", "lately", "other", "days",
)  # fmt: skip
_TRIGGER = re.compile(r"\d|\b(?:" + "|".join([*_MONTHS, *_WEEKDAYS, *_TRIGGER_WORDS]) + r")\b")


class TimeFilter(BaseModel):
    """A time a query names, resolved: the window (UTC, half-open), what to do with it, and the
    query's words without the time phrase."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used, not at import

    start: datetime | None  # inclusive; None: open
    end: datetime | None  # exclusive; None: open
    mode: TimeMode
    phrase: str  # the words resolved, as the query wrote them ("" for "when did ...")
    query: str  # the query without the phrase (the whole query when nothing else is left)
    # An event the bound is the time of ("the move"), to be found by a search first; the window
    # is open until then (shared.memory.when.timed_search resolves it).
    anchor: str | None = None
    relation: Literal["before", "after"] | None = None
    # How the search used it: "filter", "boost" (fewer than k hits in the window, or a vague
    # time), "none" (a "when" question, or an anchor not found). Set by timed_search.
    applied: Literal["filter", "boost", "none"] | None = None
    note: str | None = None

    def contains(self, at: datetime) -> bool:
        return (self.start is None or at >= self.start) and (self.end is None or at < self.end)

    def describe(self) -> str:
        """The window for a person (the memory tools' result header)."""
        if self.mode == "when" and self.start is None and self.end is None:
            return "dates shown are when each was said"
        if self.start is not None and self.end is not None:
            span = f"said {_day(self.start)} to {_day(self.end - timedelta(microseconds=1))}"
        elif self.start is not None:
            span = f"said from {_when(self.start)}"
        elif self.end is not None:
            span = f"said before {_when(self.end)}"
        else:
            span = "no time window"
        how = {"filter": "only those", "boost": "those first", "none": "not applied"}
        text = f'"{self.phrase}": {span}, {how.get(self.applied or "", self.mode)}'
        return f"{text} ({self.note})" if self.note else text


def _day(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d")


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------- resolving


class _Span:
    __slots__ = ("end", "start")

    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.end = end


# Compiled when a query first has a trigger: most recall queries name no time, and the span
# patterns are the module's largest compile, paid otherwise by every cold agent's import.
@functools.cache
def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for name, body, needs_relation in _SPANS:
        # A relation word may precede any span: "in May" is the month, "before May" the window
        # that ends where May starts.
        relation = _RELATION + " " if needs_relation else "(?:" + _RELATION + " )?"
        out.append((name, re.compile(r"\b" + relation + r"(?:the )?(?:" + body + r")\b")))
    out.append(("vague", re.compile(r"\b" + _VAGUE + r"\b")))
    return out


def resolve_time(query: str, now: datetime, tz: tzinfo = UTC) -> TimeFilter | None:
    """The time `query` names, resolved against `now` in `tz`; None when it names none (and does
    not ask "when"). Deterministic: the same query and now always give the same window."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if len(query) > MAX_QUERY_CHARS:
        return None
    # ASCII letters lowered only: the patterns are ASCII, and the offsets must be the query's.
    text = "".join(c.lower() if c.isascii() else c for c in query)
    if not _TRIGGER.search(text):
        return (
            TimeFilter(start=None, end=None, mode="when", phrase="", query=query)
            if _WHEN.search(text)
            else None
        )
    best: tuple[int, int, str, re.Match[str]] | None = None
    for name, pattern in _patterns():
        for m in pattern.finditer(text):
            key = (m.start(), -(m.end() - m.start()))
            if best is None or key < best[:2]:
                best = (key[0], key[1], name, m)
    anchored = _ANCHOR.search(text)
    if anchored is not None and (best is None or anchored.start() < best[0]):
        words = _anchor_length(anchored.group("anchor"))
        # "before the 8th of May" is a date, not an event: the span wins where it matches there.
        if words is not None and not _spans_anchor(anchored, best):
            rel = anchored.group("rel")
            relation: Literal["before", "after"] = "before" if rel == "before" else "after"
            phrase_end = anchored.start("anchor") + words
            return TimeFilter(
                start=None,
                end=None,
                mode="filter",
                phrase=query[anchored.start() : phrase_end],
                query=_without(query, anchored.start(), phrase_end),
                anchor=query[anchored.start("anchor") : phrase_end],
                relation=relation,
            )
    if best is None:
        if _WHEN.search(text):
            return TimeFilter(start=None, end=None, mode="when", phrase="", query=query)
        return None
    _, _, name, m = best
    local_now = now.astimezone(tz)
    if name == "vague":
        low, high = _vague(m.group("vague"), local_now, tz)
        return TimeFilter(
            start=low,
            end=high,
            mode="boost",
            phrase=query[m.start() : m.end()],
            query=_without(query, m.start(), m.end()),
        )
    span = _span(name, m, local_now, tz)
    if span is None:
        return None
    rel = m.groupdict().get("rel")
    start: datetime | None = span.start
    end: datetime | None = span.end
    if rel in ("before",):
        start, end = None, span.start
    elif rel in ("after",):
        start, end = span.end, None
    elif rel in ("since", "from"):
        end = None
    elif rel in ("until", "till", "by"):
        start = None
    return TimeFilter(
        start=start.astimezone(UTC) if start else None,
        end=end.astimezone(UTC) if end else None,
        # A question about what was said then is about the time of saying: only those. Any other
        # names when something happened, which may have been told of later ("I lost my job last
        # month", said this week): the window's memories first, the rest after.
        mode="filter" if _SPEECH.search(text) else "boost",
        phrase=query[m.start() : m.end()],
        query=_without(query, m.start(), m.end()),
    )


def _spans_anchor(anchored: re.Match[str], best: tuple[int, int, str, re.Match[str]] | None) -> bool:
    """Whether a time span starts within the anchor's words ("since this Monday")."""
    if best is None:
        return False
    return anchored.start() <= best[0] < anchored.end()


def _anchor_length(words: str) -> int | None:
    """How many characters of `words` (a determiner and a few words) the anchor takes: up to the
    end of its clause; None when that leaves only the determiner."""
    cut = _CLAUSE_END.search(words)
    if cut is not None:
        words = words[: cut.start()]
    end = None
    for i, m in enumerate(re.finditer(r"\S+", words)):
        if i > 0 and m.group() in _ANCHOR_STOP:
            break
        if i > 0:
            end = m.end()
    return end


def _without(query: str, start: int, end: int) -> str:
    """`query` without [start, end), tidied; the whole query when no word would be left."""
    rest = " ".join((query[:start] + " " + query[end:]).split())
    rest = re.sub(r"\s+([?.!,;:])", r"\1", rest).strip(" ,;:")
    return rest if re.search(r"[^\W_]", rest) else query


def _midnight(d: date, tz: tzinfo) -> datetime:
    return datetime.combine(d, time.min, tzinfo=tz)


def _day_span(d: date, tz: tzinfo) -> _Span:
    return _Span(_midnight(d, tz), _midnight(d + timedelta(days=1), tz))


def _week_span(d: date, tz: tzinfo) -> _Span:
    monday = d - timedelta(days=d.weekday())
    return _Span(_midnight(monday, tz), _midnight(monday + timedelta(days=7), tz))


def _month_span(year: int, month: int, tz: tzinfo) -> _Span:
    nxt = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
    return _Span(_midnight(date(year, month, 1), tz), _midnight(nxt, tz))


def _year_span(year: int, tz: tzinfo) -> _Span:
    return _Span(_midnight(date(year, 1, 1), tz), _midnight(date(year + 1, 1, 1), tz))


def _months_back(year: int, month: int, n: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) - n
    return index // 12, index % 12 + 1


def _number(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS[text]


def _latest_date(month: int, day: int, today: date) -> date | None:
    """The latest `day` of `month` not after today (29 February: the latest leap year's)."""
    for year in range(today.year, today.year - 9, -1):
        if day > calendar.monthrange(year, month)[1]:
            continue
        d = date(year, month, day)
        if d <= today:
            return d
    return None


def _span(name: str, m: re.Match[str], now: datetime, tz: tzinfo) -> _Span | None:
    g = m.groupdict()
    today = now.date()
    if name == "iso":
        try:
            return _day_span(date.fromisoformat(g["iso"]), tz)
        except ValueError:
            return None
    if name in ("day_month", "month_day"):
        month, day = _MONTHS[g["month"]], int(g["day"])
        if not 1 <= day <= 31:
            return None
        if g.get("year"):
            try:
                return _day_span(date(int(g["year"]), month, day), tz)
            except ValueError:
                return None
        latest = _latest_date(month, day, today)
        return _day_span(latest, tz) if latest else None
    if name == "day_before_yesterday":
        return _day_span(today - timedelta(days=2), tz)
    if name == "yesterday":
        return _day_span(today - timedelta(days=1), tz)
    if name == "today":
        return _day_span(today, tz)
    if name == "last_night":
        evening = _midnight(today - timedelta(days=1), tz) + timedelta(hours=18)
        return _Span(evening, evening + timedelta(hours=12))
    if name == "ago":
        n, unit = _number(g["n"]), g["unit"]
        if unit == "day":
            return _day_span(today - timedelta(days=n), tz)
        if unit == "week":
            return _week_span(today - timedelta(weeks=n), tz)
        if unit == "month":
            return _month_span(*_months_back(today.year, today.month, n), tz)
        return _year_span(today.year - n, tz)
    if name in ("rolling", "past"):
        n = _number(g["n"]) if g.get("n") else 1
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[g["unit"]] * n
        return _Span(now - timedelta(days=days), now)
    if name == "weekend":
        # The weekend that is on now ("this"/"over the"), or else the last one that ended.
        saturday = today - timedelta(days=(today.weekday() - 5) % 7)
        if g["which"] == "last" and today.weekday() >= 5:
            saturday -= timedelta(days=7)
        return _Span(_midnight(saturday, tz), _midnight(saturday + timedelta(days=2), tz))
    if name == "last_unit":
        unit = g["unit"]
        if unit == "week":
            return _week_span(today - timedelta(weeks=1), tz)
        if unit == "month":
            return _month_span(*_months_back(today.year, today.month, 1), tz)
        return _year_span(today.year - 1, tz)
    if name == "this_unit":
        unit = g["unit"]
        if unit == "week":
            return _week_span(today, tz)
        if unit == "month":
            return _month_span(today.year, today.month, tz)
        return _year_span(today.year, tz)
    if name == "weekday":
        # The latest such day before today: "on Tuesday", asked on a Tuesday, is a week ago.
        back = (today.weekday() - _WEEKDAYS[g["weekday"]]) % 7 or 7
        return _day_span(today - timedelta(days=back), tz)
    if name == "last_month_name":
        month = _MONTHS[g["month"]]
        # The latest whole such month before this one.
        year = today.year if month < today.month else today.year - 1
        return _month_span(year, month, tz)
    if name == "month_year":
        return _month_span(int(g["year"]), _MONTHS[g["month"]], tz)
    if name == "month":
        month = _MONTHS[g["month"]]
        year = today.year if month <= today.month else today.year - 1
        return _month_span(year, month, tz)
    if name in ("year", "the_year"):
        return _year_span(int(g["year"]), tz)
    return None


def _vague(word: str, now: datetime, tz: tzinfo) -> tuple[datetime, datetime | None]:
    if word == "the other day":
        start = _midnight(now.date() - timedelta(days=OTHER_DAY[1]), tz)
        end = _midnight(now.date() - timedelta(days=OTHER_DAY[0] - 1), tz)
        return start.astimezone(UTC), end.astimezone(UTC)
    return (now - timedelta(days=RECENT_DAYS)).astimezone(UTC), None


# ---------------------------------------------------------------- searching


def timed_search(
    search: Callable[..., SearchOutcome],
    workspace_id: str,
    text: str,
    *,
    now: datetime,
    tz: tzinfo,
    scope: RecallScope,
    k: int,
    tiers: Sequence[MemoryTier] | None,
    session_id: str | None,
    mode: Literal["hybrid", "bm25", "vector"],
    recent_from: str | None,
) -> SearchOutcome:
    """`search` (MemorySearch.search) with the time `text` names: filtered to its window, or boosted when
    filtering leaves fewer than k hits or the time is vague (see the module's docstring)."""
    asked = resolve_time(text, now, tz)

    def run(
        words: str, *, depth: int = k, window: TimeFilter | None = None, how: str = mode
    ) -> SearchOutcome:
        return search(
            workspace_id,
            words,
            scope=scope,
            k=depth,
            tiers=tiers,
            session_id=session_id,
            mode=how,
            recent_from=recent_from,
            created_from=window.start if window else None,
            created_before=window.end if window else None,
        )

    if asked is None:
        return run(text)
    if asked.anchor is not None:
        # By its words (BM25): k-NN always has a nearest hit, so an event nobody spoke of would
        # still be "found". A vector-only search (memory_semantic) has nothing else to go by.
        asked = _resolve_anchor(asked, run, now, "vector" if mode == "vector" else "bm25")
    if asked.mode == "when" or (asked.start is None and asked.end is None):
        applied: Literal["none"] = "none"
        words = asked.query if asked.mode == "when" else text
        outcome = run(words)
        return outcome.model_copy(update={"time": asked.model_copy(update={"applied": applied})})

    filtered: SearchOutcome | None = None
    if asked.mode == "filter":
        filtered = run(asked.query, window=asked)
        # The index failed ("recent"): a second search would fail the same way.
        if len(filtered.hits) >= k or filtered.mode == "recent":
            return filtered.model_copy(update={"time": asked.model_copy(update={"applied": "filter"})})
    wide = run(asked.query, depth=k if filtered is not None else min(k * VAGUE_DEPTH, 1000))
    if wide.mode == "recent":
        unapplied = asked.model_copy(update={"applied": "none"})
        return wide.model_copy(update={"hits": wide.hits[:k], "time": unapplied})
    hits = boost_window(wide.hits, filtered.hits if filtered else [], asked, TIME_BOOST)[:k]
    return wide.model_copy(update={"hits": hits, "time": asked.model_copy(update={"applied": "boost"})})


def _resolve_anchor(
    asked: TimeFilter, run: Callable[..., SearchOutcome], now: datetime, how: str
) -> TimeFilter:
    """The anchor's time as the window's bound: the best hit of a search for its words (without
    the determiner) among what was said before now. Not found: no window."""
    assert asked.anchor is not None
    words = asked.anchor.split(None, 1)[1]
    before_now = TimeFilter(start=None, end=now, mode="filter", phrase="", query=words)
    found = run(words, depth=1, window=before_now, how=how)
    if not found.hits or found.mode == "recent":
        return asked.model_copy(update={"note": f"{asked.anchor!r} not found in memory", "mode": "filter"})
    at = found.hits[0].created_at
    note = f"{asked.anchor!r} taken as {_when(at)}"
    if asked.relation == "before":
        return asked.model_copy(update={"end": at, "note": note})
    return asked.model_copy(update={"start": at, "note": note})


def boost_window(
    wide: Sequence[MemoryHit], inside: Sequence[MemoryHit], window: TimeFilter, boost: float
) -> list[MemoryHit]:
    """`wide` (an unfiltered search's hits, best first) with `boost` x its best score added to
    each hit said inside `window`, re-sorted. The hits of the filtered search (`inside`) that the
    wide one did not rank are added with the boost alone: ranked below the wide search's weakest
    candidate, they count as relevance 0 on its scale (min-max's weakest is 0)."""
    if not wide and not inside:
        return []
    best = wide[0].score if wide else 0.0
    bonus = boost * best if best > 0 else boost
    seen = {h.id for h in wide}
    out = [
        h.model_copy(update={"score": h.score + bonus}) if window.contains(h.created_at) else h for h in wide
    ]
    out += [h.model_copy(update={"score": bonus}) for h in inside if h.id not in seen]
    # Stable: equal scores keep the wide search's order, then the filtered one's.
    return sorted(out, key=lambda h: -h.score)
