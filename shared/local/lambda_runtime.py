"""Lambda execution environments on one machine, for `sigil dev --aws`.

Each function runs in its own child process (a "container"): it imports the handler module once,
then handles one invocation at a time, as a Lambda execution environment does. Separate processes
rather than threads because the handlers are written for that model: the webhook's resolver keeps
the current event on a module-level object, and powertools' logger and metrics keep per-invocation
state that two functions sharing one process would trample. A container also gives each function
a real cold start (its first invocation pays its imports and builds its clients) and only the
environment its stack gives it.

What is not reproduced: memory limits (the size is only reported in the context), the Lambda
runtime API, and the freezing of a container between invocations.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final

log = logging.getLogger("sigil.lambda")

ACCOUNT_ID: Final = "123456789012"  # moto's default account
# Lambda gives a function's init phase 10 s; a cold Python import on a busy laptop can take longer.
_INIT_TIMEOUT_S: Final = 60.0
# Time for a container to answer after its deadline before it is treated as timed out.
_DEADLINE_GRACE_S: Final = 1.0
# How soon an orphaned process notices its parent is gone.
_PARENT_POLL_S: Final = 0.5


class InvocationError(Exception):
    """The function failed: it raised, timed out, or its container died (Lambda's function error)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


@dataclass(frozen=True)
class FunctionSpec:
    """One function as the stack defines it: handler, limits and environment."""

    name: str  # the function name, e.g. "sigil-local-webhook"
    handler: str  # "module.attribute", e.g. "functions.webhook.handler.lambda_handler"
    timeout_s: float
    memory_mb: int
    env: Mapping[str, str] = field(default_factory=dict)
    region: str = "us-east-1"

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{self.name}"


@dataclass
class InvocationContext:
    """The attributes of the Lambda context object that handlers and powertools read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    deadline: float  # time.monotonic() when the invocation times out
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


# ---------------------------------------------------------------- inside a container


def watch_parent(on_orphaned: Callable[[], None], *, parent: int | None = None) -> threading.Thread:
    """Call `on_orphaned` once the parent process (`parent`, by default the current one) has died.

    Polled, not PR_SET_PDEATHSIG: that signal fires when the *thread* that started the child
    exits, and containers are started from request and poller threads that come and go.
    """
    expected = os.getppid() if parent is None else parent

    def watch() -> None:
        # An orphan is adopted by init or a subreaper, so its parent pid changes.
        while os.getppid() == expected:
            time.sleep(_PARENT_POLL_S)
        on_orphaned()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def _container_main(conn: Connection, spec: FunctionSpec, gateway_pid: int) -> None:
    """The child process: init (import the handler), then invoke once per request until told to stop."""
    # Ctrl-C in a terminal reaches the whole process group; the gateway decides when containers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A gateway that was killed outright cannot stop its containers; one mid-invocation would not
    # notice the closed pipe until its handler returned, so it watches for its parent's death too.
    # The gateway's pid is passed in: it may already be gone by the time this line runs.
    watch_parent(lambda: os._exit(1), parent=gateway_pid)
    os.environ.update(spec.env)
    try:
        module_name, _, attribute = spec.handler.rpartition(".")
        handler: Callable[[Any, Any], Any] = getattr(importlib.import_module(module_name), attribute)
        _local_log_format()
    except BaseException as exc:  # noqa: BLE001 - any init failure is reported like Lambda's Runtime.ImportModuleError
        traceback.print_exc()
        conn.send(("init_error", (type(exc).__name__, str(exc))))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the gateway is gone
        if request is None:
            return
        request_id, event = request
        context = InvocationContext(
            function_name=spec.name,
            invoked_function_arn=spec.arn,
            memory_limit_in_mb=spec.memory_mb,
            aws_request_id=request_id,
            deadline=time.monotonic() + spec.timeout_s,
            log_group_name=f"/aws/lambda/{spec.name}",
            log_stream_name=f"local/[$LATEST]{os.getpid()}",
        )
        try:
            result = handler(event, context)
        except Exception as exc:  # noqa: BLE001 - a function error is the handler's answer, as in Lambda
            expected = _expected(exc)
            if expected is not None:
                print(f"[ERROR] {expected}", file=sys.stderr)
            else:
                # Lambda's runtime prints an unhandled error with its traceback to the function's log.
                print(f"[ERROR] {type(exc).__name__}: {exc}", file=sys.stderr)
                traceback.print_exc()
            sys.stderr.flush()
            conn.send(("error", (type(exc).__name__, str(exc))))
        else:
            sys.stdout.flush()
            conn.send(("ok", result))


def _expected(exc: Exception) -> str | None:
    """A function error every cause of which the code raised on purpose (SigilError: a model
    server down, say), in one line; None for a bug, which keeps its traceback. The agent's batch
    fails as a whole (powertools' BatchProcessingError) when each of its records failed: its
    records' errors, already logged one line each, are its causes."""
    from shared.errors import SigilError

    if isinstance(exc, SigilError):
        return f"{type(exc).__name__}: {exc.message}"
    children = [info[1] for info in getattr(exc, "child_exceptions", None) or ()]
    if not children or not all(isinstance(c, SigilError) for c in children):
        return None
    causes = "; ".join(dict.fromkeys(f"{type(c).__name__}: {c}" for c in children))
    return f"{type(exc).__name__}: every record of the batch failed ({causes})"


def _local_log_format() -> None:
    """Print the handlers' powertools logs as the local gateway's one-line key=value records."""
    from shared.local import logs

    logs.configure()
    # "Found credentials in environment variables", once per client: true of every container here.
    logging.getLogger("botocore").setLevel(logging.WARNING)
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
        # Metrics are off on purpose, so "no metrics to publish" after each request says nothing.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
    if "shared.observability" not in sys.modules:
        return  # a handler without powertools' logger: the root handler above prints its records
    from shared.observability import logger

    logger.registered_handler.setFormatter(_local_lambda_formatter())
    # The "sigil" logger prints through its own handler; the root's would print each record twice.
    logging.getLogger(logger.service).propagate = False


# Keys every powertools record carries; the line's head already says level, logger and message.
_HIDDEN_KEYS: Final = frozenset(
    {
        "level",
        "location",
        "message",
        "timestamp",
        "service",
        "sampling_rate",
        "xray_trace_id",
        "function_arn",
        "function_memory_size",
        "function_request_id",
        "exception",
        "exception_name",
        "exception_notes",
        "stack_trace",
    }
)


def _local_lambda_formatter() -> logging.Formatter:
    """powertools' structured record (Lambda context keys included), on one key=value line.

    A subclass of powertools' formatter, not a plain Formatter: the logger's decorators append and
    clear the Lambda context keys through the formatter's API. Defined here, in the container, so
    that powertools is imported only after the function's environment is in place.
    """
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    class LocalLambdaFormatter(LambdaPowertoolsFormatter):
        def format(self, record: logging.LogRecord) -> str:
            fields: dict[str, Any] = json.loads(super().format(record))
            when = time.strftime("%H:%M:%S", time.localtime(record.created))
            line = f"{when} {record.levelname:<5} {record.name}: {fields.get('message', '')}"
            extras = " ".join(f"{k}={v}" for k, v in fields.items() if k not in _HIDDEN_KEYS)
            if extras:
                line += " " + extras
            if fields.get("exception"):
                line += "\n" + str(fields["exception"])
            return line

    return LocalLambdaFormatter()


# ---------------------------------------------------------------- the gateway's side


class Container:
    """A handle on one execution environment: started on first use, one invocation at a time."""

    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False  # the init phase (the handler's import) has completed

    def start(self) -> None:
        """Spawn the process; `wait_ready` completes the init phase (they are split so that several
        containers can import their handlers at the same time)."""
        with self._lock:
            self._spawn()

    def wait_ready(self) -> None:
        with self._lock:
            self._await_init()

    def invoke(self, event: Any) -> Any:
        """The handler's result, or InvocationError; a container that timed out or died is replaced
        by a fresh (cold) one on the next invocation."""
        with self._lock:
            self._spawn()
            self._await_init()
            conn = self._conn
            assert conn is not None  # set by _spawn
            request_id = str(uuid.uuid4())
            try:
                conn.send((request_id, event))
                if not conn.poll(self.spec.timeout_s + _DEADLINE_GRACE_S):
                    self._kill()
                    raise InvocationError(
                        "Sandbox.Timedout", f"Task timed out after {self.spec.timeout_s:.2f} seconds"
                    )
                status, payload = conn.recv()
            except (EOFError, OSError):
                self._kill()
                raise InvocationError(
                    "Runtime.ExitError", f"{self.spec.name}: the container exited"
                ) from None
            if status == "ok":
                return payload
            error_type, message = payload
            raise InvocationError(error_type, message)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the container to exit after its current invocation; kill it if it does not."""
        process, conn = self._process, self._conn
        if process is None:
            return
        if conn is not None:
            with contextlib.suppress(OSError):  # already gone
                conn.send(None)
        process.join(timeout_s)
        if process.is_alive():
            process.kill()
            process.join()
        self._process = self._conn = None

    def kill(self) -> None:
        """Stop at once, mid-invocation if need be (a caller waiting on it gets InvocationError)."""
        process = self._process
        if process is not None and process.is_alive():
            process.kill()

    # -- internals (called with the lock held)

    def _spawn(self) -> None:
        if self._process is not None:
            return
        # spawn, not fork: a fork would copy the gateway's threads and sockets (moto's server, the
        # HTTP front) into a process that must only run one handler.
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_container_main,
            args=(child, self.spec, os.getpid()),
            name=f"lambda:{self.spec.name}",
            daemon=True,
        )
        process.start()
        child.close()  # the child holds its own copy; ours would keep the pipe open after it dies
        self._process, self._conn, self._ready = process, parent, False

    def _await_init(self) -> None:
        conn = self._conn
        if conn is None or self._ready:
            return
        try:
            if not conn.poll(_INIT_TIMEOUT_S):
                self._kill()
                raise InvocationError(
                    "Runtime.InitTimeout", f"{self.spec.name}: init took over {_INIT_TIMEOUT_S} s"
                )
            status, payload = conn.recv()
        except (EOFError, OSError):
            self._kill()
            raise InvocationError(
                "Runtime.ExitError", f"{self.spec.name}: the container exited in init"
            ) from None
        if status != "ready":
            self._kill()
            error_type, message = payload
            raise InvocationError("Runtime.ImportModuleError", f"{error_type}: {message}")
        self._ready = True

    def _kill(self) -> None:
        process = self._process
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None
        self._ready = False


class FunctionPool:
    """A function's containers: an idle one serves the next invocation; under concurrency another
    is started (cold), up to `max_containers`, as Lambda scales a function out."""

    def __init__(self, spec: FunctionSpec, *, max_containers: int = 1) -> None:
        if max_containers < 1:
            raise ValueError("max_containers must be at least 1")
        self.spec = spec
        self.max_containers = max_containers
        self._containers: list[Container] = []
        self._idle: list[Container] = []
        self._cond = threading.Condition()

    def start(self) -> None:
        """Start one container now, so the first request does not wait for a whole process start."""
        with self._cond:
            if not self._containers:
                container = Container(self.spec)
                self._containers.append(container)
                self._idle.append(container)
        self._containers[0].start()

    def wait_ready(self) -> None:
        for container in list(self._containers):
            container.wait_ready()

    def invoke(self, event: Any) -> Any:
        container = self._acquire()
        try:
            return container.invoke(event)
        finally:
            with self._cond:
                self._idle.append(container)
                self._cond.notify()

    def stop(self, timeout_s: float = 5.0) -> None:
        for container in self._containers:
            container.stop(timeout_s)

    def kill(self) -> None:
        for container in self._containers:
            container.kill()

    def _acquire(self) -> Container:
        with self._cond:
            while not self._idle:
                if len(self._containers) < self.max_containers:
                    container = Container(self.spec)
                    self._containers.append(container)
                    return container
                self._cond.wait()
            # The most recently used container first: it is the warmest, as in Lambda.
            return self._idle.pop()
