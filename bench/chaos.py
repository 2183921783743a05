"""Chaos: many sessions through the real gateway while the model, the process and the store misbehave.

Run by `make bench`; prints one table per backend: `sigil dev` (embedded: SQLite lanes and
stores) and `sigil dev --aws` (the real webhook / agent Lambda handlers over moto, one SQS FIFO
poller). Each is the real process, started as the e2e tests start it (tests/e2e/conftest.py's
DevGateway, its own process group) and spoken to over HTTP with signed web-channel requests.

    .venv/bin/python bench/chaos.py                       # 50 sessions x 20 messages, both backends
    .venv/bin/python bench/chaos.py --sessions 10 --messages 8 --backend embedded
    .venv/bin/python bench/chaos.py --tasks 3                  # delegation: 20 sessions x 3 tasks

With --tasks N the run is bench/chaos_tasks.py's instead: each session's agent delegates N tasks
while processes are killed and model calls time out or fail under them, and the table counts
each task's outcome delivered (exactly once) and its side effects (none repeated).

What happens. Every session is a client sending its messages in order, each one posted three
times at once (the same event id: a platform delivering a webhook three times), without waiting
for replies. The sessions are dealt round-robin to the rows of the table; a row's sessions carry
its fault on a few of their messages (tests/support/fault_model.py, the marker `fault=<name>` at
the end of the text). Every fault is made by real means, outside our code:

- 429 / 500 / poison / hang / cut: the model server (an OpenAI-wire server the real SDK talks to)
  answers 429 once (the SDK retries), 500 three times (beyond the SDK's retries: the turn fails and
  the queue redelivers it), 500 forever (dead-lettered; the user must get the apology), hangs
  (first no answer at all, then one chunk and silence, each for --hang-s, far past the client's
  timeout --client-timeout-s, SIGIL_PROVIDER_TIMEOUT_S), drips (the stream's first chunk once a
  second for --hang-s: never a gap the per-chunk timeout sees, so only the call's overall deadline
  --deadline-s, SIGIL_PROVIDER_DEADLINE_S, ends it), or cuts the stream after two chunks.
- kill: while the turn's model call is open, the process making it is SIGKILLed. Embedded: the
  whole `sigil dev` process group, then `sigil dev` is started again on the same data directory
  (its SQLite lanes and stores persist; clients retry their posts while it is down, as platforms
  retry webhooks). AWS mode keeps moto's state in memory, so a restart of `sigil dev --aws` would
  start from empty tables and queues: instead the agent function's container (the process whose
  socket the model call came from) is SIGKILLed, as a Lambda sandbox dying mid-invocation; the
  event-source mapping sees the invocation fail and the batch returns after the visibility timeout.
- conflict: while the turn's model call is open, a second writer saves the session (the real
  session store, DynamoDB on moto's endpoint or the SQLite file, a conditional save at the version
  it read), so the turn's own conditional commit meets a version that moved under it.
- late: the redelivery after SQS's 5-minute deduplication window. After every reply has arrived and
  the queue is empty, two of each late session's messages are posted again (three copies each),
  as a platform retrying a webhook long after the first try. In AWS mode nothing is faked: moto
  forgets a FIFO deduplication id once its message is deleted (SQS would after 5 minutes), so the
  re-send is queued again, exactly as a post after the window would be, and reaches the agent,
  which must find the event id in the session and skip it ("skipped_duplicate" in the turn's log).
  The embedded lanes deduplicate for 7 days: the re-send's deduplication row is aged past that
  window first (its `seen_at` moved back 8 days in queue.db, the row the lane's own expiry rule
  then deletes), so the re-send is queued again too and takes the same path through the agent.

Counted per row (all messages of the row's sessions): replies expected (one per message: the
echo, or the apology for a dead-lettered one) and received, duplicates (more than one reply to a
message, re-sends included), replies out of send order (a reply to an earlier message after one
to a later message, in outbox order), lost (neither answered nor apologised for), dead-lettered
(answered with the apology), wrong (a reply whose text is neither its message's echo nor the
apology), and the latency from the first post of a message to its reply's creation (the outbox
entry's created_at: no polling error; it includes waiting behind the session's earlier messages).
"injected" is how many faults were really made (model faults answered, processes killed, second
writes that landed, late messages re-sent).

Settings of both backends: the real defaults (SIGIL_LANE_MAX_ATTEMPTS 5, SIGIL_PROVIDER_MAX_RETRIES
2) except SIGIL_PROVIDER_TIMEOUT_S (--client-timeout-s, so a hang is detected in seconds) and
SIGIL_PROVIDER_DEADLINE_S (--deadline-s, so a drip is cut in seconds, not the default 180), the
visibility timeout in AWS mode (1 s, so redeliveries come quickly) and SIGIL_EMBEDDING_MODEL=none
(no MiniLM on rolled-out messages: not what is measured here, and what AWS mode has by default).

Spend is not measured either, so neither prices nor budgets may decide a reply: the workspace's
budget is off (a sigil.yaml of the run's own, named by SIGIL_CONFIG: `workspaces: {default:
{budget: null}}`, so no ./sigil.yaml of the checkout is read), and the fake model is priced at $0
(SIGIL_MODEL_PRICES), so no unknown-model estimate is ever warned about or charged. Both are
printed above each table, with the budget as the gateway stored it (read back from its
workspace store). Before, the default $10 a day ran out near the end of a 1,000-turn AWS-mode run
and the last turns were answered with the budget refusal (issue 27).

A benchmark, not only a table: it fails (exit 1) when a backend did not finish, when its
workspace budget is not off, or when any reply is wrong, doubled, out of order or lost (the
guarantees it measures); the first wrong replies are printed with their text.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is not installed; the bench runs from a plain clone

import httpx  # noqa: E402

from shared.agent.turn import APOLOGY  # noqa: E402
from shared.channels import web  # noqa: E402
from shared.errors import ConcurrencyConflict  # noqa: E402
from tests.e2e.conftest import DevGateway, gateway_env  # noqa: E402
from tests.e2e.processes import kill_group  # noqa: E402
from tests.support.fault_model import FaultModel, client_pid  # noqa: E402

# The table's rows, in order; sessions are dealt to them round-robin.
ROWS = ("none", "429", "500", "hang", "drip", "cut", "poison", "kill", "conflict", "late")
# Which messages of a row's sessions carry its fault (indices past --messages are dropped).
FAULT_AT: dict[str, tuple[int, ...]] = {
    "429": (4, 13),
    "500": (4, 13),
    "hang": (2,),
    "drip": (6,),
    "cut": (4, 13),
    "poison": (10,),
    "kill": (14,),
    "conflict": (4, 13),
}
LATE_AT = (3, 9)  # re-sent after everything was answered and the queue emptied
COPIES = 3
WORKSPACE = "default"
# What the run sets so that spend decides nothing (see the module): the model's price, and a
# configuration file of its own that turns the workspace's budget off.
MODEL = "openai/fake-model"  # tests.e2e.conftest.gateway_env's SIGIL_MODEL
PRICES = {MODEL: {"input_per_mtok": 0, "output_per_mtok": 0}}
CONFIG = f"# bench/chaos.py: delivery is measured, not spend\nworkspaces:\n  {WORKSPACE}:\n    budget: null\n"


def text_for(s: int, m: int, row: str) -> str:
    text = f"s{s:02d} m{m:02d}"
    return text + f" fault={row}" if m in FAULT_AT.get(row, ()) else text


def event_for(s: int, m: int) -> str:
    return f"ev-{s:02d}-{m:02d}"


def session_for(s: int) -> str:
    return f"chaos{s:02d}"


# ---------------------------------------------------------------- the gateway under test


class Target:
    """One `sigil dev` (embedded or --aws) with the fault hooks and the queue's state."""

    def __init__(self, backend: str, work: Path, env: dict[str, str]) -> None:
        self.backend = backend
        self.gw = DevGateway(work / "state", env, extra_args=["--aws"] if backend == "aws" else [])
        self.kills = 0
        self.second_writes = 0
        self.hook_errors: list[str] = []
        self._restart = threading.Lock()
        self._clients: dict[str, Any] = {}
        self.sessions: Any = None

    def start(self) -> None:
        self.gw.start()
        if self.backend == "aws":
            found = re.search(r"moto on (http://\S+) \(region (\S+)\)", self.gw.log_text())
            assert found, "the start-up help names moto's endpoint"
            import boto3

            for service in ("sqs", "dynamodb"):
                self._clients[service] = boto3.client(
                    service,
                    endpoint_url=found.group(1),
                    region_name=found.group(2),
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",  # noqa: S106 - moto accepts any credentials
                )
        self.sessions = self._open_session_store()

    def stop(self) -> None:
        self.gw.stop()

    # -- faults

    def kill(self, client: tuple[str, int]) -> bool:
        """SIGKILL what made this model call: the agent's container (aws) or the whole gateway
        (embedded, then started again on its data directory). False if that process is gone."""
        with self._restart:
            proc = self.gw.proc
            assert proc is not None
            pid = client_pid(client, [p.pid for p in self.gw.processes()])
            if pid is None:
                return False  # made by a gateway killed since, with another turn
            if self.backend == "aws":
                os.kill(pid, signal.SIGKILL)
                self.kills += 1
                return True
            kill_group(proc.pid)
            proc.wait()
            self.gw.proc = None
            self.kills += 1
            self.gw.start()  # same data directory, same port
            return True

    def bump(self, text: str) -> None:
        """A second writer saves the session at the version it reads (a conditional write)."""
        found = re.match(r"s(\d+) ", text)
        assert found
        session_id = web.session_id_for(session_for(int(found.group(1))))
        store = self.sessions
        for _ in range(5):
            session = store.get(WORKSPACE, session_id)
            if session is None:
                self.hook_errors.append(f"conflict: no session {session_id} yet")
                return
            try:
                store.save(
                    session.model_copy(update={"updated_at": datetime.now(UTC)}),
                    expected_version=session.version,
                )
            except ConcurrencyConflict:
                continue  # a conflict of its own: read again and retry
            self.second_writes += 1
            return
        self.hook_errors.append(f"conflict: the second writer never landed on {session_id}")

    def _open_session_store(self) -> Any:
        """The second writer's store: the real adapter, on moto's endpoint or the SQLite file.
        Opened once, before the turns start (the fault hooks run on the model server's threads)."""
        if self.backend == "aws":
            from shared.adapters.aws.dynamodb import DynamoSessionStore

            return DynamoSessionStore("sigil-local-sessions", client=self._clients["dynamodb"])
        from shared.adapters.embedded.db import Database
        from shared.adapters.embedded.sessions import SqliteSessionStore

        return SqliteSessionStore(Database(self.gw.data_dir / "sigil.db"))

    def stored_budget(self) -> str:
        """The workspace's budget as the gateway stored it (JSON; "null": off), from its store."""
        if self.backend == "aws":
            from shared.adapters.aws.dynamodb import DynamoWorkspaceStore

            store: Any = DynamoWorkspaceStore("sigil-local-memory", client=self._clients["dynamodb"])
        else:
            from shared.adapters.embedded.db import Database
            from shared.adapters.embedded.workspaces import SqliteWorkspaceStore

            store = SqliteWorkspaceStore(Database(self.gw.data_dir / "sigil.db"))
        config = store.get(WORKSPACE)
        if config is None:
            return "no workspace stored"
        return json.dumps(None if config.budget is None else config.budget.model_dump(mode="json"))

    def session_version(self, s: int) -> int:
        session = self.sessions.get(WORKSPACE, web.session_id_for(session_for(s)))
        return -1 if session is None else int(session.version)

    def expire_dedup(self, event_id: str) -> None:
        """Embedded only: age the event's deduplication row past the lane's 7-day window."""
        if self.backend != "embedded":
            return
        with contextlib.closing(sqlite3.connect(self.gw.data_dir / "queue.db", timeout=30)) as db, db:
            db.execute(
                "UPDATE lane_dedup SET seen_at = seen_at - 8 * 86400 WHERE dedup_id = ?",
                (f"{WORKSPACE}.web.{event_id}",),
            )

    # -- the queue

    def pending(self) -> int:
        """Turns queued or in flight."""
        if self.backend == "aws":
            return self._queue_size("turns.fifo")
        with contextlib.closing(sqlite3.connect(self.gw.data_dir / "queue.db", timeout=30)) as db:
            return int(db.execute("SELECT COUNT(*) FROM lane_items").fetchone()[0])

    def dead_letters(self) -> int:
        if self.backend == "aws":
            return self._queue_size("turns-dlq.fifo")
        with contextlib.closing(sqlite3.connect(self.gw.data_dir / "queue.db", timeout=30)) as db:
            return int(db.execute("SELECT COUNT(*) FROM lane_dead").fetchone()[0])

    def _queue_size(self, name: str) -> int:
        sqs = self._clients["sqs"]
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


# ---------------------------------------------------------------- the clients


@dataclass
class Clients:
    """Signed web-channel requests that retry, as a platform does, while the gateway is down."""

    target: Target
    deadline_s: float
    http: httpx.Client = field(
        default_factory=lambda: httpx.Client(timeout=60, limits=httpx.Limits(max_connections=256))
    )
    answers: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, s: int, m: int, text: str) -> None:
        raw = json.dumps(
            {"event_id": event_for(s, m), "session": session_for(s), "user": f"u{s}", "text": text}
        )
        give_up = time.monotonic() + self.deadline_s
        while True:
            try:
                resp = self.http.post(
                    f"{self.target.gw.url}/webhooks/web/{WORKSPACE}",
                    content=raw.encode(),
                    headers=web.signed_headers(self.target.gw.secret, raw.encode()),
                )
                if resp.status_code < 300:
                    with self._lock:
                        self.answers[str(resp.json().get("status"))] += 1
                    return
                answer = f"HTTP {resp.status_code}"
                if resp.status_code < 500:  # refused: a retry would be refused too
                    with self._lock:
                        self.answers[answer] += 1
                    return
            except httpx.TransportError as exc:
                answer = type(exc).__name__
            with self._lock:
                self.retries += 1
                if time.monotonic() > give_up:
                    self.answers[f"gave up ({answer})"] += 1
                    return
            time.sleep(0.2)

    def outbox(self, s: int) -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        after = 0
        give_up = time.monotonic() + self.deadline_s
        while True:
            target = f"/sessions/{WORKSPACE}/{session_for(s)}/outbox?after={after}"
            try:
                resp = self.http.get(
                    self.target.gw.url + target,
                    headers=web.signed_headers(self.target.gw.secret, target.encode()),
                )
                resp.raise_for_status()
            except httpx.HTTPError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.5)  # down for a restart, or busy: read again
                continue
            page = resp.json()
            replies += page["replies"]
            if not page["replies"]:
                return replies
            after = page["next_after"]


# ---------------------------------------------------------------- one run


@dataclass
class Run:
    backend: str
    sessions: int
    messages: int
    sent_at: dict[tuple[int, int], float] = field(default_factory=dict)
    replies: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    late_sent: int = 0
    skipped_late: int = 0
    killed_turns: int = 0
    conflict_versions: Counter[int] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    send_s: float = 0.0
    finished: bool = True
    answers: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    drips_cut: int = 0
    second_writes: int = 0
    dead_letters_queue: int = 0
    problems: list[str] = field(default_factory=list)
    stored_budget: str = ""  # the workspace's budget as stored by the gateway: "null" (off)


def row_of(s: int) -> str:
    return ROWS[s % len(ROWS)]


def run_backend(backend: str, args: argparse.Namespace) -> Run:
    run = Run(backend, args.sessions, args.messages)
    with tempfile.TemporaryDirectory(prefix=f"chaos-{backend}-") as tmp:
        work = Path(tmp)
        model = FaultModel(hang_s=args.hang_s)
        with model:
            config = work / "sigil.yaml"
            config.write_text(CONFIG)
            env = gateway_env(model) | {
                "SIGIL_CONFIG": str(config),
                "SIGIL_MODEL_PRICES": json.dumps(PRICES),
                "SIGIL_PROVIDER_TIMEOUT_S": str(args.client_timeout_s),
                "SIGIL_PROVIDER_DEADLINE_S": str(args.deadline_s),
                "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "1",
                "SIGIL_EMBEDDING_MODEL": "none",
                **dict(kv.split("=", 1) for kv in args.env),
            }
            target = Target(backend, work, env)
            model.on_kill, model.on_conflict = target.kill, target.bump
            target.start()
            try:
                run.stored_budget = target.stored_budget()
                _drive(run, target, args)
            finally:
                target.stop()
                if args.keep_logs:
                    dest = Path(args.keep_logs) / backend
                    dest.mkdir(parents=True, exist_ok=True)
                    (dest / "gateway.log").write_text(target.gw.log_text())
            run.injected = Counter(model.injected)
            run.kills, run.second_writes = target.kills, target.second_writes
            run.drips_cut = model.drips_cut
            run.problems += target.hook_errors + model.callback_errors
    return run


def _resend_late(target: Target, clients: Clients, late: list[tuple[int, int]]) -> int:
    """Send each late message again, COPIES times at once, past the deduplication window; the
    length of the gateway's log before them. Only what the agent logs from there on answers for
    the re-sends: a kill earlier in the run can have made the agent skip one of these very
    messages already (a redelivery of a turn that had committed when the gateway died), under the
    same event id."""
    before = len(target.gw.log_text())
    for s, m in late:
        target.expire_dedup(event_for(s, m))
    with ThreadPoolExecutor(max_workers=max(1, len(late) * COPIES)) as pool:
        for f in [
            pool.submit(clients.post, s, m, text_for(s, m, "late")) for s, m in late for _ in range(COPIES)
        ]:
            f.result()
    return before


def _drive(run: Run, target: Target, args: argparse.Namespace) -> None:
    clients = Clients(target, deadline_s=args.timeout_s)
    started = time.monotonic()

    def send_session(s: int, pool: ThreadPoolExecutor) -> None:
        for m in range(run.messages):
            text = text_for(s, m, row_of(s))
            run.sent_at[(s, m)] = time.time()
            copies = [pool.submit(clients.post, s, m, text) for _ in range(COPIES)]
            for copy in copies:
                copy.result()

    with (
        ThreadPoolExecutor(max_workers=run.sessions * COPIES) as pool,
        ThreadPoolExecutor(run.sessions) as senders,
    ):
        for done in [senders.submit(send_session, s, pool) for s in range(run.sessions)]:
            done.result()
    run.send_s = time.monotonic() - started

    def all_answered() -> bool:
        missing = [
            s
            for s in range(run.sessions)
            if not {event_for(s, m) for m in range(run.messages)}
            <= {str(r.get("in_reply_to")) for r in run.replies.get(s, [])}
        ]
        for s in missing:
            run.replies[s] = clients.outbox(s)
        return not missing

    give_up = started + args.timeout_s

    def settle() -> bool:
        """Every message answered and the queue empty; False if that never came. The outboxes are
        read once the queue is empty (reading them all the while would slow the gateway down);
        a queue that stays empty with messages unanswered is not waited for long: those are lost."""
        answered, progress = -1, time.monotonic()
        while time.monotonic() < give_up:
            if target.pending() > 0:
                time.sleep(1.0)
                continue
            if all_answered():
                return True
            now = sum(len(r) for r in run.replies.values())
            if now != answered:
                answered, progress = now, time.monotonic()
            elif time.monotonic() - progress > args.stall_s:
                run.problems.append(f"nothing answered for {args.stall_s:.0f} s with the queue empty")
                return True
            time.sleep(1.0)
        return False

    run.finished = settle()
    # The redelivery after the deduplication window: every original is answered and deleted.
    late = [(s, m) for s in range(run.sessions) if row_of(s) == "late" for m in LATE_AT if m < run.messages]
    before_late = _resend_late(target, clients, late)
    run.late_sent = len(late)
    run.finished = settle() and run.finished
    run.elapsed_s = time.monotonic() - started
    for s in range(run.sessions):
        run.replies[s] = clients.outbox(s)
    late_ids = {event_for(s, m) for s, m in late}

    def count_log() -> bool:
        # The agent's turn line for each delivery it ran: a late re-send it skipped says so.
        text = target.gw.log_text()
        found = re.findall(r" turn .*event_id=(\S+) .*outcome=skipped_duplicate", text[before_late:])
        run.skipped_late = sum(event in late_ids for event in found)
        in_flight = r"(\d+) item\(s\) were in flight|records=(\d+) error=Runtime.ExitError"
        run.killed_turns = sum(int(a or b) for a, b in re.findall(in_flight, text))
        return run.skipped_late >= len(late)

    # A container's log lines reach the gateway's log after its invocation returns.
    deadline = time.monotonic() + 10
    while not count_log() and time.monotonic() < deadline:
        time.sleep(0.2)
    run.answers, run.retries = clients.answers, clients.retries
    run.conflict_versions = Counter(
        target.session_version(s) for s in range(run.sessions) if row_of(s) == "conflict"
    )
    run.dead_letters_queue = target.dead_letters()


# ---------------------------------------------------------------- the table


@dataclass
class Row:
    name: str
    sessions: int = 0
    injected: int = 0
    expected: int = 0
    received: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    lost: int = 0
    dead: int = 0
    wrong: int = 0
    latencies: list[float] = field(default_factory=list)
    wrong_replies: list[str] = field(default_factory=list)  # "s03 m18: <the reply's text>"

    def add(self, other: Row) -> None:
        for name in (
            "sessions",
            "injected",
            "expected",
            "received",
            "duplicates",
            "out_of_order",
            "lost",
            "dead",
            "wrong",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies += other.latencies
        self.wrong_replies += other.wrong_replies


def _created(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(entry["created_at"]).replace("Z", "+00:00")).timestamp()


def score(run: Run) -> list[Row]:
    rows = {name: Row(name) for name in ROWS}
    injected = {
        **{name: run.injected.get(name, 0) for name in ROWS},
        "kill": run.kills,
        "conflict": run.second_writes,
        "late": run.late_sent,
    }
    for name, row in rows.items():
        row.injected = injected[name]
    for s in range(run.sessions):
        row = rows[row_of(s)]
        row.sessions += 1
        row.expected += run.messages
        index = {event_for(s, m): m for m in range(run.messages)}
        seen: dict[int, dict[str, Any]] = {}
        highest = -1
        for entry in sorted(run.replies.get(s, []), key=lambda e: int(e["seq"])):
            m = index.get(str(entry.get("in_reply_to")))
            if m is None:
                row.wrong += 1
                row.wrong_replies.append(f"s{s:02d} to {entry.get('in_reply_to')}: {entry['text']!r}")
                continue
            if m in seen:
                row.duplicates += 1
                continue
            seen[m] = entry
            if m < highest:
                row.out_of_order += 1
            highest = max(highest, m)
            if entry["text"] == APOLOGY:
                row.dead += 1
            elif entry["text"] != text_for(s, m, row_of(s)):
                row.wrong += 1
                row.wrong_replies.append(f"s{s:02d} m{m:02d}: {entry['text']!r}")
            row.latencies.append(_created(entry) - run.sent_at[(s, m)])
        row.received += len(seen)
        row.lost += run.messages - len(seen)
    return list(rows.values())


def _pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]:.1f}"


def print_table(run: Run) -> None:
    label = "embedded (sigil dev)" if run.backend == "embedded" else "aws (sigil dev --aws: handlers on moto)"
    size = f"{run.sessions} sessions x {run.messages} messages"
    print(f"\nchaos, {label}: {size}, each posted {COPIES} times at once")
    price = PRICES[MODEL]
    print(
        f"  spend decides nothing: workspace {WORKSPACE}'s budget as stored {run.stored_budget} "
        f"(sigil.yaml budget: null); {MODEL} priced ${price['input_per_mtok']} in / "
        f"${price['output_per_mtok']} out per 1M tokens (SIGIL_MODEL_PRICES)"
    )
    header = (
        "fault",
        "sessions",
        "injected",
        "expected",
        "received",
        "dup",
        "out of order",
        "lost",
        "dead-lettered",
        "wrong",
        "p50 s",
        "p95 s",
    )
    widths = (10, 8, 8, 8, 8, 4, 12, 5, 13, 5, 6, 6)
    print(
        "  ".join(
            h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    total = Row("all")
    rows = score(run)
    for row in rows:
        total.add(row)
    for row in [*rows, total]:
        cells = (
            row.name,
            row.sessions,
            row.injected,
            row.expected,
            row.received,
            row.duplicates,
            row.out_of_order,
            row.lost,
            row.dead,
            row.wrong,
            _pct(row.latencies, 0.5),
            _pct(row.latencies, 0.95),
        )
        print(
            "  ".join(
                str(c).rjust(w) if i else str(c).ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    answers = ", ".join(f"{k} {v}" for k, v in sorted(run.answers.items()))
    print(
        f"  posts answered: {answers}; retried while down or busy: {run.retries}. "
        f"Dead letters in the queue: {run.dead_letters_queue}."
    )
    print(
        f"  late re-sends: {run.late_sent} ({COPIES} copies each), runs of them the agent skipped as "
        f"duplicates: {run.skipped_late}. SIGKILLs: {run.kills}, turns in flight in the killed "
        f"processes: {run.killed_turns}."
    )
    print(
        f"  drips: {run.injected.get('drip', 0)}, cut by the call's overall deadline before they "
        f"ended: {run.drips_cut}."
    )
    versions = ", ".join(f"{n} at version {v}" for v, n in sorted(run.conflict_versions.items()))
    print(f"  conflict sessions after their {run.messages} turns and the second writes: {versions}.")
    print(
        f"  sending took {run.send_s:.0f} s, the whole run {run.elapsed_s:.0f} s"
        + ("" if run.finished else " (TIMED OUT: the counts are as of then)")
    )
    if run.problems:
        print("  problems:", "; ".join(sorted(set(run.problems))[:10]))
    wrong = [text for row in rows for text in row.wrong_replies]
    if wrong:
        print(f"  wrong replies ({len(wrong)}), the first {min(5, len(wrong))}:", "; ".join(wrong[:5]))
    for failure in failures(run, rows):
        print(f"  FAILED: {failure}")


def failures(run: Run, rows: list[Row]) -> list[str]:
    """Why this backend's run fails: what it measures broke, or it did not measure it."""
    found = [] if run.finished else ["the run did not finish"]
    if run.stored_budget != "null":
        found.append(f"the workspace's budget is not off ({run.stored_budget}): spend could decide replies")
    total = Row("all")
    for row in rows:
        total.add(row)
    for name, count in (
        ("wrong", total.wrong),
        ("duplicate", total.duplicates),
        ("out of order", total.out_of_order),
        ("lost", total.lost),
    ):
        if count:
            found.append(f"{count} {name} repl{'ies' if count != 1 else 'y'}")
    return found


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=None, help="50; with --tasks, 20")
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--backend", choices=("both", "embedded", "aws"), default="both")
    parser.add_argument("--client-timeout-s", type=float, default=2.0, help="SIGIL_PROVIDER_TIMEOUT_S")
    parser.add_argument("--hang-s", type=float, default=30.0, help="how long a hung model call hangs")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=8.0,
        help="SIGIL_PROVIDER_DEADLINE_S: a model call's overall deadline",
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="give up on a backend after this")
    parser.add_argument("--stall-s", type=float, default=60.0, help="stop waiting when nothing moves")
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="more gateway settings"
    )
    parser.add_argument("--keep-logs", metavar="DIR", help="copy each gateway's log here")
    parser.add_argument(
        "--tasks", type=int, default=0, help="delegation: each session's agent delegates this many tasks"
    )
    args = parser.parse_args(argv)
    if args.sessions is None:
        args.sessions = 20 if args.tasks else 50
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.tasks:
        from bench import chaos_tasks

        return chaos_tasks.main(args)
    ok = True
    for backend in ("embedded", "aws") if args.backend == "both" else (args.backend,):
        run = run_backend(backend, args)
        print_table(run)
        ok = not failures(run, score(run)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
