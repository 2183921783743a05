"""Lane wait: how long a message waits, from its receipt to its own model call, when many sessions
write at once.

Starts `sigil dev --aws` (the real webhook and agent Lambda handlers over moto, one SQS FIFO
event-source poller: tests/e2e/conftest.py's DevGateway) or `sigil dev` (embedded), with a model
server that answers every call after a fixed latency (--latency-s, 3 s: a typical turn). Then
--sessions sessions (50) post one message each, all at once, and the bench records for each
message when the webhook answered it (its receipt) and when its model call reached the model
server; the wait is the difference (after a first round on other sessions, so the containers are warm;
--cold leaves it out). Printed: the wait's p50, p95 and max, and the spread of the
model calls (the last one's start less the first one's), overall and per agent batch (the calls
that started within one latency of each other).

    .venv/bin/python bench/lane_wait.py                      # 50 sessions, 3 s model, --aws
    .venv/bin/python bench/lane_wait.py --agent-batches 5         # 5 batches at once, as in the cloud
    .venv/bin/python bench/lane_wait.py --backend embedded --sessions 20

To measure the code before a change, run this file with PYTHONPATH pointing at a checkout of it
(`git archive main | tar -x -C /tmp/before`): the gateway's processes import `shared` from there.
A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is not installed; the bench runs from a plain clone

import httpx  # noqa: E402

from shared.channels import web  # noqa: E402
from tests.e2e.conftest import DevGateway, gateway_env  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, echo_last_user  # noqa: E402

WORKSPACE = "default"


class FixedLatencyModel(FakeOpenAI):
    """Answers every call (the echo) `latency_s` after it arrived; notes when each message's
    call arrived (the bench's clock, time.monotonic)."""

    def __init__(self, latency_s: float) -> None:
        super().__init__(self._answer)
        self.latency_s = latency_s
        self.called_at: dict[str, float] = {}
        self._calls = threading.Lock()

    def _answer(self, body: dict[str, Any]) -> str:
        text = echo_last_user(body)
        with self._calls:
            self.called_at.setdefault(text, time.monotonic())
        time.sleep(self.latency_s)
        return text


def text_for(s: int) -> str:
    return f"lane wait s{s:03d}"


def ours(model: FixedLatencyModel, sessions: int) -> dict[int, float]:
    """When each session's own model call arrived, by session."""
    return {s: model.called_at[text_for(s)] for s in range(sessions) if text_for(s) in model.called_at}


def post(http: httpx.Client, gw: DevGateway, s: int) -> float:
    """Post session s's message; when the webhook answered it (time.monotonic)."""
    raw = json.dumps(
        {"event_id": f"lw-{s:03d}", "session": f"lw{s:03d}", "user": f"u{s}", "text": text_for(s)}
    ).encode()
    resp = http.post(
        f"{gw.url}/webhooks/web/{WORKSPACE}", content=raw, headers=web.signed_headers(gw.secret, raw)
    )
    resp.raise_for_status()
    return time.monotonic()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def batches(starts: list[float], latency_s: float) -> list[list[float]]:
    """The model calls grouped by when they started: a call more than half a latency after the
    previous one begins a new group (a batch of the agent's that ran after the one before)."""
    groups: list[list[float]] = []
    for at in sorted(starts):
        if groups and at - groups[-1][-1] < latency_s / 2:
            groups[-1].append(at)
        else:
            groups.append([at])
    return groups


def run(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    sessions, latency_s, agent_batches, warm = (
        args.sessions,
        args.latency_s,
        args.agent_batches,
        not args.cold,
    )
    model = FixedLatencyModel(latency_s)
    with model, tempfile.TemporaryDirectory(prefix="lane-wait-") as tmp:
        env = gateway_env(model) | {"SIGIL_EMBEDDING_MODEL": "none"}
        if agent_batches > 1:
            # Batches at once, as Lambda's event source runs them; a batch must never outlast the
            # visibility timeout, or it is received again while it runs.
            env |= {
                "SIGIL_AWS_MODE_AGENT_BATCHES": str(agent_batches),
                "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "120",
            }
        gw = DevGateway(Path(tmp) / "state", env, extra_args=["--aws"] if backend == "aws" else [])
        gw.start()
        try:
            with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=256)) as http:
                give_up = time.monotonic() + args.timeout_s
                if warm:
                    # A first round on other sessions, answered before the measured one: every
                    # container the measured round uses is started (Lambda's warm steady state).
                    with ThreadPoolExecutor(max_workers=sessions) as pool:
                        list(pool.map(lambda s: post(http, gw, s), range(sessions, 2 * sessions)))
                    while len(ours(model, 2 * sessions)) < sessions and time.monotonic() < give_up:
                        time.sleep(0.2)
                    time.sleep(latency_s + 1)  # their turns finish
                with ThreadPoolExecutor(max_workers=sessions) as pool:
                    received = list(pool.map(lambda s: post(http, gw, s), range(sessions)))
                # (the consolidation model's calls, per-turn extraction's, are not the sessions')
                while len(ours(model, sessions)) < sessions and time.monotonic() < give_up:
                    time.sleep(0.2)
        finally:
            gw.stop()
    called = ours(model, sessions)
    waits = [called[s] - received[s] for s in called]
    starts = list(called.values())
    groups = batches(starts, latency_s)
    return {
        "backend": backend if agent_batches == 1 else f"{backend} x{agent_batches}",
        "called": len(waits),
        "p50": pct(waits, 0.5) if waits else float("nan"),
        "p95": pct(waits, 0.95) if waits else float("nan"),
        "max": max(waits, default=float("nan")),
        "spread": max(starts) - min(starts) if starts else float("nan"),
        "groups": len(groups),
        "group_spread": max((g[-1] - g[0] for g in groups), default=float("nan")),
        "group_sizes": [len(g) for g in groups],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("aws", "embedded", "both"), default="aws")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--latency-s", type=float, default=3.0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--cold", action="store_true", help="no warm-up round: containers start cold")
    parser.add_argument(
        "--agent-batches",
        type=int,
        default=1,
        help="--aws: agent batches at once (SIGIL_AWS_MODE_AGENT_BATCHES); the cloud runs 5",
    )
    args = parser.parse_args(argv)
    backends = ("aws", "embedded") if args.backend == "both" else (args.backend,)
    warmth = "containers cold" if args.cold else "after a warm-up round on other sessions"
    print(
        f"{args.sessions} sessions, one message each, at once; model latency {args.latency_s:.1f} s; {warmth}"
    )
    print(
        f"{'backend':<11} {'called':>6} {'wait p50':>9} {'wait p95':>9} {'wait max':>9} "
        f"{'spread':>7} {'batches':>7} {'in-batch spread':>15}  batch sizes"
    )
    for backend in backends:
        r = run(backend, args)
        print(
            f"{r['backend']:<11} {r['called']:>6} {r['p50']:>8.1f}s {r['p95']:>8.1f}s {r['max']:>8.1f}s "
            f"{r['spread']:>6.1f}s {r['groups']:>7} {r['group_spread']:>14.2f}s  "
            f"{','.join(map(str, r['group_sizes']))}"
        )
    print("wait: webhook's answer to the message's model call; spread: first to last model call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
