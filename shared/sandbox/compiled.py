"""The compiled sandbox runtime, kept so that no execution environment compiles it twice.

Compiling the 26 MB CPython-for-WASI module takes ~25-35 s on one slow core; loading Wasmtime's
serialized form of it takes ~0.1 s. A serialized module is native machine code that Wasmtime maps
executable and runs with the process's privileges, so a cached one is trusted code: where it is
kept and who may write there is a security decision (docs/sandbox.md#the-compile-and-its-cache).

Every copy, on disk or in S3, is stored the same way, under a key that names everything the
compiled code depends on (the runtime's SHA-256, the wasmtime version, the machine, the engine
settings that change the code: ENGINE_SETTINGS):

    <key>/sha256            the hex SHA-256 of the serialized bytes (the pointer)
    <key>/<sha256>.cwasm    the serialized bytes

A reader takes the pointer, fetches the body it names and refuses it unless its bytes hash to
that name: a truncated or substituted body is never deserialized. Both are written once
(`put_once`): the first writer's pointer stands, so a later writer cannot replace code that
others load. Who may write at all is the store's business: the S3 cache is writable only by the
precompile function (infra/constructs/sandbox_cache.py); the disk cache is a directory the
current user owns and nobody else may write (`DirectoryStore` refuses one that is not).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Literal

from shared.errors import SandboxError
from shared.ports import CompiledCodeStore

log = logging.getLogger("sigil.sandbox")

# The engine settings that change the compiled code (fuel and epoch checks are compiled into
# every loop); shared.sandbox.wasm.engine() applies exactly these, and the key names them.
ENGINE_SETTINGS: dict[str, bool | int] = {
    "consume_fuel": True,
    "epoch_interruption": True,
    "max_wasm_stack": 1 << 20,
}
POINTER = "sha256"

Source = Literal["local", "remote", "compiled"]


def cache_key(runtime_sha256: str, machine: str | None = None) -> str:
    """What the compiled code depends on, as one path-safe name."""
    settings = ",".join(f"{k}={v}" for k, v in sorted(ENGINE_SETTINGS.items()))
    flags = hashlib.sha256(settings.encode()).hexdigest()[:12]
    arch = machine or platform.machine()
    return f"python-{runtime_sha256[:16]}-wasmtime{version('wasmtime')}-{arch}-{flags}"


def default_dir() -> Path:
    """SIGIL_SANDBOX_CACHE; in Lambda /tmp (private to the execution environment); elsewhere the
    user's cache directory, so `sigil dev` and the tests compile once per machine and user. Never
    a shared /tmp outside Lambda: anyone on the machine could plant code there."""
    explicit = os.environ.get("SIGIL_SANDBOX_CACHE")
    if explicit:
        return Path(explicit)
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return Path(tempfile.gettempdir()) / "sigil-sandbox"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sigil" / "sandbox"


class DirectoryStore:
    """CompiledCodeStore in a directory: the disk cache (a Lambda environment's /tmp, a machine's
    user cache). Refuses a directory another user owns or may write, whose files it cannot trust."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _checked_root(self) -> Path:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = self.root.stat()
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SandboxError(
                f"the sandbox cache {self.root} is writable by others: not trusted", limit="runtime"
            )
        return self.root

    def get(self, key: str) -> bytes | None:
        path = self._checked_root() / key
        return path.read_bytes() if path.is_file() else None

    def put_once(self, key: str, data: bytes) -> bool:
        path = self._checked_root() / key
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        try:
            # A hard link fails when the name exists: the first writer's file stands, whole.
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def discard(self, key: str) -> None:
        """Forget `key` (a copy that failed its check or that this engine cannot load)."""
        folder = self._checked_root() / key
        for path in folder.glob("*") if folder.is_dir() else ():
            path.unlink(missing_ok=True)


def read(store: CompiledCodeStore, key: str) -> tuple[bytes, str] | None:
    """The serialized module under `key` and its SHA-256, or None when the store has none.
    SandboxError when the body does not hash to the pointer's value (it is never loaded)."""
    pointer = store.get(f"{key}/{POINTER}")
    if pointer is None:
        return None
    digest = pointer.decode("ascii", errors="replace").strip()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise SandboxError(f"the compiled module's pointer {key}/{POINTER} is malformed", limit="runtime")
    body = store.get(f"{key}/{digest}.cwasm")
    if body is None:
        raise SandboxError(f"the compiled module {key}/{digest}.cwasm is missing", limit="runtime")
    found = hashlib.sha256(body).hexdigest()
    if found != digest:
        raise SandboxError(
            f"the compiled module {key} hashes to {found[:12]}…, not {digest[:12]}…: refused",
            limit="runtime",
        )
    return body, digest


def write(store: CompiledCodeStore, key: str, body: bytes) -> str:
    """Store `body` under `key` (body first, then the pointer, both write-once); its SHA-256."""
    digest = hashlib.sha256(body).hexdigest()
    store.put_once(f"{key}/{digest}.cwasm", body)
    store.put_once(f"{key}/{POINTER}", digest.encode())
    return digest


@dataclass(frozen=True)
class Loaded:
    body: bytes
    sha256: str
    source: Source
    seconds: float


@dataclass
class _Remote:
    store: CompiledCodeStore | None = None
    # Called when the remote store has no copy (the agent asks the precompile function to fill it).
    on_miss: Callable[[], None] | None = None


_remote = _Remote()


def use_remote(store: CompiledCodeStore | None, *, on_miss: Callable[[], None] | None = None) -> None:
    """The process's remote cache (shared.cloud sets the S3 one); None: disk only."""
    _remote.store, _remote.on_miss = store, on_miss


def remote() -> CompiledCodeStore | None:
    return _remote.store


def on_miss() -> Callable[[], None] | None:
    return _remote.on_miss


def obtain(
    key: str,
    compile_module: Callable[[], bytes],
    *,
    local: DirectoryStore,
    remote: CompiledCodeStore | None = None,
    publish: bool = False,
    on_miss: Callable[[], None] | None = None,
) -> Loaded:
    """The serialized module: from the disk cache, else the remote one (kept on disk after),
    else compiled here (kept on disk; put in the remote store only when `publish`, which only
    its one writer does). A copy that fails its check is logged and passed over."""
    began = time.perf_counter()
    for source, store in (("local", local), ("remote", remote)):
        if store is None:
            continue
        try:
            found = read(store, key)
        except SandboxError as exc:
            log.error("compiled sandbox module refused", extra={"source": source, "reason": exc.message})
            if store is local:
                local.discard(key)
            continue
        except Exception:
            # An unreachable or refusing remote cache only costs this environment a compile.
            if store is local:
                raise
            log.exception("compiled sandbox module cache unreadable", extra={"source": source})
            continue
        if found is None:
            continue
        body, digest = found
        if store is not local:
            write(local, key, body)
        elif remote is not None and publish:
            write(remote, key, body)  # the writer's warm environment: the remote may still lack it
        return Loaded(body, digest, "local" if store is local else "remote", time.perf_counter() - began)
    if remote is not None and not publish and on_miss is not None:
        on_miss()  # before the compile: the writer starts on it while this environment compiles
    body = compile_module()
    digest = write(local, key, body)
    if remote is not None and publish:
        write(remote, key, body)
    return Loaded(body, digest, "compiled", time.perf_counter() - began)
