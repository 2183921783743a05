"""The real `sigil dev` process, talked to over HTTP, with a local OpenAI-wire server as its model.

Waits are for conditions, polled, with deadlines generous enough for a loaded two-core machine:
a deadline is a safety net, never the thing a test measures. Every process a test starts dies
with the test, pass, fail or Ctrl-C; the session's last check fails the run if one is left.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from shared.channels import web
from tests.e2e.processes import Proc, in_groups, kill_group, live_processes
from tests.support.consolidation import is_consolidation
from tests.support.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
# A cold `sigil dev --aws` imports three handlers in three processes and starts two servers; on a
# busy two-core machine that has taken over a minute.
START_TIMEOUT_S = 180.0
# How long a stopped gateway's children are given to exit before the group is killed.
STOP_GRACE_S = 30.0
REPLY_TIMEOUT_S = 120.0

# Every process group a test started (each `sigil dev` leads its own), for the session's last check.
STARTED_GROUPS: set[int] = set()


def _kill_started_groups() -> None:
    for pgid in STARTED_GROUPS:
        kill_group(pgid)


# A run that ends without tearing its fixtures down (an error in pytest itself) still kills them.
atexit.register(_kill_started_groups)


def wait_until(condition: Callable[[], bool], *, timeout: float, interval: float = 0.2) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def turn_requests(fake: FakeOpenAI) -> list[dict[str, object]]:
    """The requests turns made: without the consolidation model's (they come on their own clock)."""
    return [r for r in list(fake.requests) if not is_consolidation(r)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DevGateway:
    """One `sigil dev` child process; restartable on the same data directory."""

    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)  # more `sigil dev` options, e.g. ["--aws"]
    launcher: list[str] = field(default_factory=list)  # a command that runs `sigil dev` as its child

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DevGateway:
        with (self.data_dir.parent / f"gateway-{len(self.output)}.log").open("w") as log:
            self.proc = subprocess.Popen(
                [
                    *self.launcher,
                    str(Path(sys.executable).parent / "sigil"),
                    "dev",
                    "--data-dir",
                    str(self.data_dir),
                    "--port",
                    str(self.port),
                    *self.extra_args,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                # Its own session and process group: everything it starts can be killed as one,
                # and a Ctrl-C in pytest's terminal does not reach it before its teardown does.
                start_new_session=True,
            )
        STARTED_GROUPS.add(self.proc.pid)
        self.output.append(log.name)
        try:
            if not wait_until(self._healthy, timeout=START_TIMEOUT_S, interval=0.1):
                raise RuntimeError(f"sigil dev did not become healthy: {self.log_text()}")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"sigil dev exited: {self.log_text()}")
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Ctrl-C, as a developer would stop it; then whatever is left of its group is killed."""
        if self.proc is None:
            return
        group = self.proc.pid
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=STOP_GRACE_S)
            # Its children normally exit with it; any that have not are stopped here.
            wait_until(lambda: not in_groups({group}), timeout=STOP_GRACE_S)
        finally:
            kill_group(group)
            self.proc.wait()
            self.proc = None
        # Forgotten once empty: the atexit net must not signal a later process given its number.
        if wait_until(lambda: not in_groups({group}), timeout=10):
            STARTED_GROUPS.discard(group)

    def processes(self) -> list[Proc]:
        """The live processes of this gateway's group: itself and everything it started."""
        assert self.proc is not None
        return in_groups({self.proc.pid})

    def log_text(self) -> str:
        return "".join(Path(p).read_text() for p in self.output)

    @property
    def secret(self) -> str:
        data = json.loads((self.data_dir / "secrets.json").read_text())
        value = data[web.secret_name("default")]
        assert isinstance(value, str)
        return value

    # -- a signed web client

    def post(
        self,
        text: str,
        *,
        session: str = "s1",
        event_id: str | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        raw = (
            body
            if body is not None
            else json.dumps(
                {"event_id": event_id or uuid.uuid4().hex, "session": session, "user": "u1", "text": text}
            ).encode()
        )
        hdrs = headers if headers is not None else web.signed_headers(self.secret, raw)
        # Generous: 20 clients at once against a gateway whose handlers share two busy cores (a
        # CI run) can wait several seconds; a retry would not do, as it would answer "duplicate".
        return httpx.post(f"{self.url}/webhooks/web/default", content=raw, headers=hdrs, timeout=60)

    def outbox(self, session: str = "s1", after: int = 0) -> list[dict[str, object]]:
        target = f"/sessions/default/{session}/outbox?after={after}"
        resp = httpx.get(
            self.url + target, headers=web.signed_headers(self.secret, target.encode()), timeout=60
        )
        resp.raise_for_status()
        replies = resp.json()["replies"]
        assert isinstance(replies, list)
        return replies

    def wait_replies(
        self, n: int, session: str = "s1", timeout: float = REPLY_TIMEOUT_S
    ) -> list[dict[str, object]]:
        replies = self.outbox(session)

        def arrived() -> bool:
            nonlocal replies
            replies = self.outbox(session)
            return len(replies) >= n

        wait_until(arrived, timeout=timeout, interval=0.1)
        return replies


def gateway_env(fake: FakeOpenAI | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGIL_", "OPENAI_"))}
    env["PYTHONUNBUFFERED"] = "1"
    if fake is not None:
        env |= {
            "SIGIL_MODEL": "openai/fake-model",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "sk-test",
        }
    return env


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def gateway(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[DevGateway]:
    gw = DevGateway(tmp_path / "state", gateway_env(fake_openai)).start()
    try:
        yield gw
    finally:
        gw.stop()


def _descendants(root: int, processes: list[Proc]) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for p in processes:
        children.setdefault(p.ppid, []).append(p)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """After the e2e tests, no process they started is alive: a leak fails the run.

    Two nets: the process groups the gateways led (which keep their orphans), and any new
    descendant of this pytest process.
    """
    before = {p.pid for p in _descendants(os.getpid(), live_processes())}
    yield

    def leftovers() -> list[Proc]:
        processes = live_processes()
        # multiprocessing's resource tracker serves this pytest process itself (a test that spawns
        # a FunctionPool in-process starts it once) and ends when pytest does: not a test's leak.
        new = [
            p
            for p in _descendants(os.getpid(), processes)
            if p.pid not in before and "multiprocessing.resource_tracker" not in p.args
        ]
        grouped = [p for p in processes if p.pgid in STARTED_GROUPS]
        return list({p.pid: p for p in new + grouped}.values())

    # A process killed a moment ago may still be on its way out.
    wait_until(lambda: not leftovers(), timeout=10)
    left = leftovers()
    _kill_started_groups()
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    assert not left, "processes outlived the e2e tests:\n" + "\n".join(
        f"  {p.pid} (group {p.pgid}): {p.args}" for p in left
    )
