"""Chaos with delegation (`bench/chaos.py --tasks N`): sessions whose agent delegates N tasks each,
while the model, the process and the queue misbehave under the tasks (docs/delegation.md).

    .venv/bin/python bench/chaos.py --tasks 3                       # 20 sessions x 3 tasks, both backends
    .venv/bin/python bench/chaos.py --tasks 3 --sessions 4 --backend embedded

The same real gateway as bench/chaos.py (`sigil dev`, and `sigil dev --aws`: the real handlers on
moto), spoken to over signed web-channel HTTP, with the same fault-making model server
(tests/support/fault_model.py) and process kills. Every session posts one message, three times
at once (a platform delivering its webhook three times): "sNN delegate N". The scripted model
(an OpenAI-wire server the real SDK talks to) answers it with N `delegate` calls of the worker
role at once; each task's agent makes STEPS `memory_store` calls, one a model call, then calls
`finish_task` with the summary "done sNNtK"; the agent answers each task's outcome, when it
reaches the session's lane, with "outcome sNNtK" (or "outcome failed <id>" for a task that did
not finish). The tasks are dealt round-robin to the table's rows; a row's tasks get its fault on
their model call FAULT_CALL (after their first memory_store ran, so a repeat would show):

- kill: the process making the task's model call is SIGKILLed (embedded: the whole `sigil dev`,
  started again on its data directory; aws: the agent function's container), so the task's step
  is redelivered and must continue from its last saved step;
- hang: the call hangs past the client's timeout, twice (the SDK retries the first; the second
  fails the invocation): a timeout, then a redelivery;
- 500: HTTP 500 three times in a row (beyond the SDK's retries): the invocation fails, and the
  lane redelivers the step;
- cut: the stream is cut mid-answer: the invocation fails and is redelivered.

Counted per row, from what the user sees (the session's outbox) and what the stores hold (the
TaskStore, and the memory the workers wrote): the tasks, their endings, the outcomes delivered
(each task's "outcome" reply), duplicates (a task told twice), lost (a task never told), the side
effects expected (STEPS facts a task), executed (facts stored) and repeated (a fact stored more
than once: its reinforced_count above 1), and the time from the post to the outcome's reply.

At the end, with the queue empty and nothing moving, the task sweep runs (shared.tasks.sweep, as
the hourly maintenance runs it) on the gateway's stores, with its clock at the latest deadline of
the tasks still active plus the sweep's grace: what the sweep of that hour would do. A task no
step will come for (its step item dead-lettered without the runner's give-up) is timed out
there, and its outcome goes to the session's lane; the run waits for those outcomes' replies.
A task ended so counts as an other ending (not done), and its "outcome failed <id>" reply as
told.

A benchmark, not only a table: it fails (exit 1) when a backend did not finish, or when any
outcome is doubled or lost, or a side effect repeated or missing.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench import chaos
from shared.tasks.runner import TASK_NOTE
from tests.e2e.conftest import gateway_env
from tests.support.fake_openai import FakeReply, Json, echo_last_user
from tests.support.fault_model import FaultModel

ROWS = ("none", "kill", "hang", "500", "cut")
STEPS = 3  # memory_store calls a task makes before finish_task
FAULT_CALL = 1  # the task's model call (0-based) its fault is made on
COPIES = chaos.COPIES
WORKSPACE = chaos.WORKSPACE
# Budgets off and the model at $0 (spend decides nothing here either); caps wide enough for every
# task at once (the caps themselves are tested elsewhere).
CONFIG = (
    "# bench/chaos.py --tasks: delivery is measured, not spend\n"
    f"workspaces:\n  {WORKSPACE}:\n    budget: null\n"
    "    delegation:\n      max_active_per_session: 10\n      max_active_per_workspace: 1000\n"
)
_KEY = re.compile(r"\bs(\d+)t(\d+)\b")
_DELEGATE = re.compile(r"^s(\d+) delegate (\d+)$")


def key_for(s: int, k: int) -> str:
    return f"s{s:02d}t{k}"


def row_of(s: int, k: int, tasks: int) -> str:
    return ROWS[(s * tasks + k) % len(ROWS)]


def brief_for(s: int, k: int, tasks: int) -> str:
    return f"chaos task {key_for(s, k)} fault={row_of(s, k, tasks)}: store {STEPS} facts, then finish"


def _content(message: Json) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _system(body: Json) -> str:
    return "".join(_content(m) for m in body.get("messages", []) if m.get("role") == "system")


def _task_calls(body: Json) -> tuple[str, int] | None:
    """A task's model call: its task's key and how many tool results it already has."""
    if TASK_NOTE not in _system(body):
        return None
    messages = body.get("messages", [])
    brief = next((_content(m) for m in messages if m.get("role") == "user"), "")
    found = _KEY.search(brief)
    if found is None:
        return None
    return found.group(0), sum(m.get("role") == "tool" for m in messages)


def script(tasks: int) -> Any:
    """The scripted model, for the agent the user talks to and for its task agents."""

    def answer(body: Json) -> str | FakeReply:
        in_task = _task_calls(body)
        if in_task is not None:
            key, done = in_task
            if done < STEPS:
                fact = {"subject": "chaos", "predicate": f"{key} step {done}", "object": f"done {key} {done}"}
                return FakeReply(tool_calls=[("memory_store", fact)])
            finish = {"summary": f"done {key}", "findings": [], "confidence": 0.9}
            return FakeReply(tool_calls=[("finish_task", finish)])
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return "delegated"
        text = echo_last_user(body)
        if text.startswith("[Task "):
            done_key = re.search(r"done (s\d+t\d+)", text)
            if done_key:
                return f"outcome {done_key.group(1)}"
            task_id = re.match(r"\[Task (\S+)", text)
            return f"outcome failed {task_id.group(1) if task_id else '?'}"
        asked = _DELEGATE.match(text.strip())
        if asked:
            s, n = int(asked.group(1)), int(asked.group(2))
            calls: list[tuple[str, Json | str]] = [
                ("delegate", {"role": "worker", "brief": brief_for(s, k, tasks)}) for k in range(n)
            ]
            return FakeReply(tool_calls=calls)
        return text

    return answer


class TaskFaults(FaultModel):
    """The fault model, marking a task's model calls by its brief's fault and the call's place:
    each (task, call) is its own request across retries, and only call FAULT_CALL is faulted."""

    def __init__(self, tasks: int, sessions: int, *, hang_s: float) -> None:
        super().__init__(script(tasks), hang_s=hang_s)
        self.rows = {key_for(s, k): row_of(s, k, tasks) for s in range(sessions) for k in range(tasks)}

    def marked(self, body: Json) -> tuple[str, str | None]:
        in_task = _task_calls(body)
        if in_task is None:
            return super().marked(body)
        key, done = in_task
        fault = self.rows.get(key) if done == FAULT_CALL else None
        return f"{key} call {done}", (None if fault == "none" else fault)


# ---------------------------------------------------------------- one run


@dataclass
class TaskRun:
    backend: str
    sessions: int
    tasks: int
    sent_at: dict[int, float] = field(default_factory=dict)
    replies: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)  # key -> the task's final status
    facts: dict[str, list[int]] = field(default_factory=dict)  # key -> reinforced_count of each fact
    injected: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    killed_turns: int = 0
    finished: bool = True
    elapsed_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    stored_budget: str = ""
    retries: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    records: dict[str, str] = field(default_factory=dict)  # key -> the task's record, in one line
    dead_letters: int = 0
    swept: int = 0  # tasks the sweep timed out at the end
    task_ids: dict[str, str] = field(default_factory=dict)  # key -> the task's id


def run_backend(backend: str, args: argparse.Namespace) -> TaskRun:
    run = TaskRun(backend, args.sessions, args.tasks)
    with tempfile.TemporaryDirectory(prefix=f"chaos-tasks-{backend}-") as tmp:
        work = Path(tmp)
        model = TaskFaults(args.tasks, args.sessions, hang_s=args.hang_s)
        with model:
            config = work / "sigil.yaml"
            config.write_text(CONFIG)
            env = gateway_env(model) | {
                "SIGIL_CONFIG": str(config),
                "SIGIL_MODEL_PRICES": json.dumps(chaos.PRICES),
                "SIGIL_PROVIDER_TIMEOUT_S": str(args.client_timeout_s),
                "SIGIL_PROVIDER_DEADLINE_S": str(args.deadline_s),
                "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "1",
                "SIGIL_EMBEDDING_MODEL": "none",
                **dict(kv.split("=", 1) for kv in args.env),
            }
            target = chaos.Target(backend, work, env)
            model.on_kill = target.kill
            target.start()
            try:
                run.stored_budget = target.stored_budget()
                _drive(run, target, args)
            finally:
                target.stop()
                if args.keep_logs:
                    dest = Path(args.keep_logs) / f"tasks-{backend}"
                    dest.mkdir(parents=True, exist_ok=True)
                    (dest / "gateway.log").write_text(target.gw.log_text())
            run.injected = Counter(model.injected)
            run.kills = target.kills
            run.problems += target.hook_errors + model.callback_errors
    return run


def _drive(run: TaskRun, target: chaos.Target, args: argparse.Namespace) -> None:
    clients = chaos.Clients(target, deadline_s=args.timeout_s)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, run.sessions * COPIES)) as pool:
        futures = []
        for s in range(run.sessions):
            run.sent_at[s] = time.time()
            futures += [
                pool.submit(clients.post, s, 0, f"s{s:02d} delegate {run.tasks}") for _ in range(COPIES)
            ]
        for f in futures:
            f.result()
    expected = 1 + run.tasks  # "delegated", then one outcome a task
    give_up = started + args.timeout_s
    _wait(run, clients, target, args, expected=expected, give_up=give_up)
    run.swept = _sweep(target)
    if run.swept:  # their outcomes are on the lanes: wait for the agent's replies to them
        _wait(run, clients, target, args, expected=expected, give_up=give_up)
    # A duplicate would come after the expected replies: settle, then read every outbox whole.
    time.sleep(min(5.0, args.stall_s))
    for s in range(run.sessions):
        run.replies[s] = clients.outbox(s)
    run.elapsed_s = time.monotonic() - started
    run.answers, run.retries = clients.answers, clients.retries
    run.dead_letters = target.dead_letters()
    _read_stores(run, target)
    text = target.gw.log_text()
    in_flight = r"(\d+) item\(s\) were in flight|records=(\d+) error=Runtime.ExitError"
    run.killed_turns = sum(int(a or b) for a, b in re.findall(in_flight, text))


def _wait(
    run: TaskRun,
    clients: chaos.Clients,
    target: chaos.Target,
    args: argparse.Namespace,
    *,
    expected: int,
    give_up: float,
) -> None:
    """Until every session has its replies and the queue is empty, nothing moves for stall_s, or
    the run's time is up (then it did not finish)."""
    answered, progress = -1, time.monotonic()
    while time.monotonic() < give_up:
        for s in range(run.sessions):
            if len(run.replies.get(s, [])) < expected:
                run.replies[s] = clients.outbox(s)
        now = sum(len(r) for r in run.replies.values())
        if target.pending() == 0 and all(
            len(run.replies.get(s, [])) >= expected for s in range(run.sessions)
        ):
            return
        if now != answered:
            answered, progress = now, time.monotonic()
        elif target.pending() == 0 and time.monotonic() - progress > args.stall_s:
            run.problems.append(f"nothing answered for {args.stall_s:.0f} s with the queue empty")
            return
        time.sleep(1.0)
    run.finished = False


def _sweep(target: chaos.Target) -> int:
    """The task sweep on the gateway's stores (module docstring): how many tasks it timed out."""
    from shared.adapters import build_backend
    from shared.cli._app import target_settings
    from shared.tasks.sweep import GRACE, sweep_tasks

    backend = build_backend(target_settings(target.gw.data_dir))
    try:
        active = backend.tasks.list_tasks(WORKSPACE, active=True, limit=10_000) if backend.tasks else []
        if not active:
            return 0
        # As the hourly sweep would, once the last of their deadlines and the grace have passed.
        moment = max(t.deadline_at for t in active) + GRACE + timedelta(seconds=1)
        return sweep_tasks(backend, clock=lambda: moment).timed_out
    finally:
        backend.close()


def _read_stores(run: TaskRun, target: chaos.Target) -> None:
    """The tasks' statuses and the facts their workers stored, through the gateway's own stores
    (the data dir's, or the `sigil dev --aws` stores on moto, as the admin commands reach them)."""
    from shared.adapters import build_backend
    from shared.cli._app import target_settings
    from shared.memory.keys import normalize_key
    from shared.models import WORKSPACE_WIDE

    backend = build_backend(target_settings(target.gw.data_dir))
    try:
        if backend.tasks is None:
            run.problems.append("the backend has no task store")
            return
        for task in backend.tasks.list_tasks(WORKSPACE, limit=10_000):
            found = _KEY.search(task.brief)
            if found:
                run.statuses[found.group(0)] = task.status
                run.task_ids[found.group(0)] = task.id
                run.records[found.group(0)] = (
                    f"{task.id} {task.status} invocations={task.invocations} steps={task.steps} "
                    f"told={task.outcome_delivered} cancel={task.cancel_requested} error={task.error!r}"
                )
        wanted = {
            normalize_key(f"{key_for(s, k)} step {i}"): key_for(s, k)
            for s in range(run.sessions)
            for k in range(run.tasks)
            for i in range(STEPS)
        }
        after: str | None = None
        while page := backend.memory.list_triples(WORKSPACE, scope=WORKSPACE_WIDE, after=after, limit=500):
            after = page[-1].id
            for fact in page:
                key = wanted.get(fact.predicate)
                if key is not None:
                    run.facts.setdefault(key, []).append(fact.reinforced_count)
    finally:
        backend.close()


# ---------------------------------------------------------------- the table


@dataclass
class Row:
    name: str
    tasks: int = 0
    injected: int = 0
    done: int = 0
    other_endings: int = 0
    delivered: int = 0
    duplicates: int = 0
    lost: int = 0
    effects_expected: int = 0
    effects_executed: int = 0
    effects_repeated: int = 0
    latencies: list[float] = field(default_factory=list)

    def add(self, other: Row) -> None:
        for name in (
            "tasks",
            "injected",
            "done",
            "other_endings",
            "delivered",
            "duplicates",
            "lost",
            "effects_expected",
            "effects_executed",
            "effects_repeated",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies += other.latencies


def _created(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(entry["created_at"]).replace("Z", "+00:00")).timestamp()


def score(run: TaskRun) -> list[Row]:
    rows = {name: Row(name) for name in ROWS}
    for name, row in rows.items():
        row.injected = run.kills if name == "kill" else run.injected.get(name, 0)
    for s in range(run.sessions):
        told = _told(run, s)
        told_at = {
            str(entry["text"]).split()[1]: _created(entry)
            for entry in sorted(run.replies.get(s, []), key=lambda e: int(e["seq"]), reverse=True)
            if str(entry["text"]).startswith("outcome s")
        }
        for k in range(run.tasks):
            key = key_for(s, k)
            row = rows[row_of(s, k, run.tasks)]
            row.tasks += 1
            status = run.statuses.get(key)
            row.done += status == "done"
            row.other_endings += status not in (None, "done")
            n = told[key]
            row.delivered += min(n, 1)
            row.duplicates += max(0, n - 1)
            if n == 0 and status == "done":
                row.lost += 1
            if key in told_at:
                row.latencies.append(told_at[key] - run.sent_at[s])
            counts = run.facts.get(key, [])
            row.effects_expected += STEPS if status == "done" else 0
            row.effects_executed += len(counts)
            row.effects_repeated += sum(c - 1 for c in counts if c > 1) + max(0, len(counts) - STEPS)
    for name, row in rows.items():
        # A task never created, or never ended, was lost too.
        row.lost += sum(
            1
            for s in range(run.sessions)
            for k in range(run.tasks)
            if row_of(s, k, run.tasks) == name and run.statuses.get(key_for(s, k)) is None
        )
    return list(rows.values())


def _told(run: TaskRun, s: int) -> Counter[str]:
    """Session s's outcome replies per task key: "outcome sNNtK" for a task done, "outcome failed
    <task id>" for one that ended otherwise (the sweep's timed_out among them)."""
    keys = {task_id: key for key, task_id in run.task_ids.items()}
    told: Counter[str] = Counter()
    for entry in run.replies.get(s, []):
        text = str(entry["text"])
        if m := re.fullmatch(r"outcome (s\d+t\d+)", text):
            told[m.group(1)] += 1
        elif (m := re.fullmatch(r"outcome failed (\S+)", text)) and m.group(1) in keys:
            told[keys[m.group(1)]] += 1
    return told


def _unfinished(run: TaskRun) -> list[str]:
    """The tasks not done, or done and not told once: each named, with its record."""
    found = []
    for s in range(run.sessions):
        told = Counter(str(e["text"]) for e in run.replies.get(s, []))
        for k in range(run.tasks):
            key = key_for(s, k)
            if run.statuses.get(key) != "done" or told[f"outcome {key}"] != 1:
                found.append(key)
    return found


def failures(run: TaskRun, rows: list[Row]) -> list[str]:
    found = [] if run.finished else ["the run did not finish"]
    if run.stored_budget != "null":
        found.append(f"the workspace's budget is not off ({run.stored_budget})")
    total = Row("all")
    for row in rows:
        total.add(row)
    for name, count in (
        ("outcome(s) delivered twice or more", total.duplicates),
        ("task(s) lost (never told, or never made)", total.lost),
        ("side effect(s) repeated", total.effects_repeated),
        ("task(s) not done", total.other_endings),
    ):
        if count:
            found.append(f"{count} {name}")
    if total.effects_executed < total.effects_expected:
        found.append(f"{total.effects_expected - total.effects_executed} side effect(s) missing")
    if total.delivered < total.tasks:
        found.append(f"{total.tasks - total.delivered} outcome(s) not delivered")
    return found


def print_table(run: TaskRun) -> None:
    label = "embedded (sigil dev)" if run.backend == "embedded" else "aws (sigil dev --aws: handlers on moto)"
    print(
        f"\nchaos with delegation, {label}: {run.sessions} sessions x {run.tasks} tasks "
        f"({STEPS} memory_store calls each, the fault on model call {FAULT_CALL}), "
        f"each post sent {COPIES} times"
    )
    print(f"  spend decides nothing: workspace {WORKSPACE}'s budget as stored {run.stored_budget}")
    header = (
        "fault",
        "tasks",
        "injected",
        "done",
        "other end",
        "told",
        "dup",
        "lost",
        "effects exp",
        "executed",
        "repeated",
        "p50 s",
        "p95 s",
    )
    widths = (6, 5, 8, 5, 9, 5, 4, 5, 11, 8, 8, 6, 6)

    def line(cells: tuple[object, ...]) -> str:
        return "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(header))
    rows = score(run)
    total = Row("all")
    for row in rows:
        total.add(row)
    for row in [*rows, total]:
        print(
            line(
                (
                    row.name,
                    row.tasks,
                    row.injected,
                    row.done,
                    row.other_endings,
                    row.delivered,
                    row.duplicates,
                    row.lost,
                    row.effects_expected,
                    row.effects_executed,
                    row.effects_repeated,
                    chaos._pct(row.latencies, 0.5),
                    chaos._pct(row.latencies, 0.95),
                )
            )
        )
    answers = ", ".join(f"{k} {v}" for k, v in sorted(run.answers.items()))
    print(f"  posts answered: {answers}; retried while down or busy: {run.retries}.")
    print(f"  SIGKILLs: {run.kills}, items in flight in the killed processes: {run.killed_turns}.")
    print(
        f"  the whole run {run.elapsed_s:.0f} s"
        + ("" if run.finished else " (TIMED OUT: the counts are as of then)")
    )
    print(f"  dead letters in the queue: {run.dead_letters}.")
    print(f"  tasks the sweep timed out at the end (nothing else would end them): {run.swept}.")
    if run.problems:
        print("  problems:", "; ".join(sorted(set(run.problems))[:10]))
    for key in _unfinished(run):
        print(f"  {key}: {run.records.get(key, 'no task stored')}")
    for failure in failures(run, rows):
        print(f"  FAILED: {failure}")


def main(args: argparse.Namespace) -> int:
    ok = True
    for backend in ("embedded", "aws") if args.backend == "both" else (args.backend,):
        run = run_backend(backend, args)
        print_table(run)
        ok = not failures(run, score(run)) and ok
    return 0 if ok else 1
