"""Which messages a per-turn extraction reads, and how the watermark moves
(shared.consolidation.turn_extraction: spec 003's last 6 messages, a burst's back to the watermark)."""

from __future__ import annotations

import pytest

from shared.consolidation.turn_extraction import MAX_WINDOW, TURN_WINDOW, _extended, _window_start


@pytest.mark.parametrize(
    ("seq", "covered", "start"),
    [
        (1, None, 0),  # a new session: everything so far
        (9, None, 0),  # a first extraction reaches back over a burst, MAX_WINDOW at most
        (99, None, 99 - MAX_WINDOW + 1),
        (11, (0, 9), 11 - TURN_WINDOW + 1),  # one turn since: the last 6, context included
        (15, (0, 5), 6),  # a burst since the last: back to the first message not extracted
        (60, (0, 9), 60 - MAX_WINDOW + 1),  # more than MAX_WINDOW since: a gap, left to compaction
        (9, (0, 9), 10),  # everything up to the turn is covered: nothing to read (a redelivery)
    ],
)
def test_the_window_starts_at_the_last_six_or_the_first_not_extracted(
    seq: int, covered: tuple[int, int] | None, start: int
) -> None:
    assert _window_start(seq, covered) == start


@pytest.mark.parametrize(
    ("covered", "first", "last", "watermark"),
    [
        (None, 0, 1, "0:1"),
        ((0, 9), 6, 11, "0:11"),  # overlapping: the range grows
        ((0, 9), 10, 13, "0:13"),  # contiguous: the range grows
        ((0, 9), 41, 60, "41:60"),  # past a gap: a new range; compaction extracts 10-40 (and 0-9 again)
        ((5, 7), 4, 9, "4:9"),  # a window that starts before the range covers it whole
    ],
)
def test_the_watermark_extends_a_contiguous_range_and_restarts_past_a_gap(
    covered: tuple[int, int] | None, first: int, last: int, watermark: str
) -> None:
    assert _extended(covered, first, last) == watermark
