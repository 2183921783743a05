"""Lanes end to end: 20 sessions x 10 messages sent concurrently through the real `sigil dev`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DevGateway, gateway_env
from tests.support.consolidation import is_consolidation
from tests.support.fake_openai import FakeOpenAI, echo_last_user

SESSIONS, MESSAGES, MODEL_LATENCY_S = 20, 10, 0.05


class Recorder:
    """A model that takes a little time, and notes when each call started and ended."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        if is_consolidation(body):
            return "{}"  # per-turn extraction, after a session's quiet: not a turn, nothing to note
        text = echo_last_user(body)
        start = time.monotonic()
        time.sleep(MODEL_LATENCY_S)
        with self._lock:
            self.calls.append((text, start, time.monotonic()))
        return text


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def busy_gateway(tmp_path: Path, recorder: Recorder) -> Iterator[DevGateway]:
    with FakeOpenAI(responder=recorder) as fake:
        gw = DevGateway(tmp_path / "state", gateway_env(fake)).start()
        try:
            yield gw
        finally:
            gw.stop()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_each_sessions_replies_come_in_send_order_sessions_in_parallel_none_lost(
    busy_gateway: DevGateway, recorder: Recorder
) -> None:
    gw = busy_gateway

    def send_session(s: int) -> list[str]:
        # One client per session sends its messages in order; the 20 clients run at once.
        statuses = []
        for m in range(MESSAGES):
            resp = gw.post(f"s{s:02d}-m{m:02d}", session=f"sess{s:02d}", event_id=f"e-{s:02d}-{m:02d}")
            statuses.append(resp.json()["status"])
        return statuses

    with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
        results = list(pool.map(send_session, range(SESSIONS)))
    assert all(status == "queued" for statuses in results for status in statuses)

    # Then every session gets all its replies, in the order its messages were sent
    for s in range(SESSIONS):
        replies = gw.wait_replies(MESSAGES, session=f"sess{s:02d}", timeout=120)
        assert [r["text"] for r in replies] == [f"s{s:02d}-m{m:02d}" for m in range(MESSAGES)]
        assert [r["in_reply_to"] for r in replies] == [f"e-{s:02d}-{m:02d}" for m in range(MESSAGES)]

    # and the model saw each session's messages in order, one at a time per session
    assert len(recorder.calls) == SESSIONS * MESSAGES
    by_session: dict[str, list[tuple[str, float, float]]] = {}
    for text, start, end in recorder.calls:
        by_session.setdefault(text[:3], []).append((text, start, end))
    for calls in by_session.values():
        calls.sort(key=lambda c: c[1])
        assert [c[0] for c in calls] == sorted(c[0] for c in calls)
        assert max_overlap([(c[1], c[2]) for c in calls]) == 1

    # while different sessions ran at the same time
    overall = max_overlap([(start, end) for _, start, end in recorder.calls])
    assert overall >= 4
    t0 = min(start for _, start, _ in recorder.calls)
    timeline = sorted(recorder.calls, key=lambda c: c[1])[:24]
    print(f"\npeak concurrent turns: {overall}; first model calls (ms from the first):")
    print("  " + "  ".join(f"{text}@{(start - t0) * 1000:.0f}" for text, start, _ in timeline))
