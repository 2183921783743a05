"""The sandbox's compiled-runtime cache (shared.sandbox.compiled, docs/sandbox.md#the-compile-and-its-cache).

On moto S3: the precompile function's handler puts the compiled runtime in the cache bucket; a
new environment (an empty disk cache) loads it from there without compiling, and the hostile
corpus runs against that deserialized module exactly as against a compiled one. A body that does
not hash to its pointer is refused and never loaded; both stores are write-once; a disk cache
others may write is not trusted.

The "writer" environment starts from this machine's disk cache (the other sandbox tests fill it,
compiling once per machine), so no test here waits half a minute for a compile.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from functions.sandbox.handler import lambda_handler
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.sandbox_cache import PREFIX, S3CompiledCache
from shared.backend import Backend
from shared.errors import SandboxError
from shared.sandbox import compiled
from shared.sandbox.compiled import DirectoryStore
from shared.sandbox.wasm import RUNTIME_SHA256, WasmExecutor, forget_module, loaded_module
from tests.integration.test_sandbox import HOSTILE, LIMITS, host
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, provision

BUCKET = "sigil-sandbox-cache-test"
KEY = compiled.cache_key(RUNTIME_SHA256)


@pytest.fixture(scope="module")
def machine_copy() -> bytes:
    """The compiled runtime as this machine's disk cache holds it (compiled here when it has none)."""
    forget_module()
    loaded_module()
    found = compiled.read(DirectoryStore(compiled.default_dir()), KEY)
    assert found is not None
    return found[0]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3CompiledCache]:
    with mock_aws():
        clients.reset()
        clients.s3(REGION).create_bucket(Bucket=BUCKET)
        yield S3CompiledCache(BUCKET, region=REGION)
    clients.reset()


@pytest.fixture
def fresh_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A new execution environment: an empty disk cache, nothing loaded in the process."""
    monkeypatch.setenv("SIGIL_SANDBOX_CACHE", str(tmp_path / "tmp-cache"))
    forget_module()
    yield tmp_path / "tmp-cache"
    cloud.reset()
    forget_module()


def test_the_precompile_function_fills_the_bucket_and_a_new_environment_loads_it_without_compiling(
    s3: S3CompiledCache,
    machine_copy: bytes,
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The writer: the precompile function's handler, with what the stack sets.
    settings = provision("sandboxcache").settings(sandbox_cache_bucket=BUCKET)
    cloud.reset(config=settings)
    monkeypatch.delenv("SIGIL_SANDBOX_CACHE", raising=False)
    forget_module()
    done = lambda_handler({}, context_for("sigil-sandbox-precompile"))  # type: ignore[arg-type]
    digest = hashlib.sha256(machine_copy).hexdigest()
    assert done["sha256"] == digest
    assert s3.get(f"{KEY}/sha256") == digest.encode()
    assert s3.get(f"{KEY}/{digest}.cwasm") == machine_copy

    # A new agent environment: empty /tmp; the stack's settings point it at the bucket.
    monkeypatch.setenv("SIGIL_SANDBOX_CACHE", str(tmp_path / "agent-tmp"))
    cloud.reset(config=settings.model_copy(update={"sandbox_precompile_function": "sigil-precompile"}))
    cloud.use_sandbox_cache()
    forget_module()
    try:
        _, loaded = loaded_module()
        assert loaded.source == "remote" and loaded.sha256 == digest
        # Kept on its disk: the environment's next process (none in Lambda, but `sigil dev`
        # restarts) reads it there.
        assert (tmp_path / "agent-tmp" / KEY / f"{digest}.cwasm").read_bytes() == machine_copy

        # The deserialized module contains the hostile corpus as the compiled one does.
        executor = WasmExecutor()
        try:
            for name, (script, limit) in sorted(HOSTILE.items()):
                with pytest.raises(SandboxError) as caught:
                    executor.run(script, inputs={}, limits=LIMITS, host=host(backend))
                assert caught.value.limit == limit, (name, caught.value.message)
            ok = executor.run("print(6 * 7)", inputs={}, limits=LIMITS, host=host(backend))
            assert ok.stdout == "42\n"
        finally:
            executor.close()
    finally:
        cloud.reset()
        forget_module()


def test_a_body_that_does_not_hash_to_its_pointer_is_refused_and_never_loaded(
    s3: S3CompiledCache, machine_copy: bytes, fresh_environment: Path
) -> None:
    # Someone put a body under the pointer's name that is not what was hashed (a truncated upload
    # would look the same): the reader refuses it before Wasmtime sees a byte.
    digest = hashlib.sha256(machine_copy).hexdigest()
    planted = machine_copy[:-4096] + b"\xcc" * 4096
    s3.put_once(f"{KEY}/{digest}.cwasm", planted)
    s3.put_once(f"{KEY}/sha256", digest.encode())
    with pytest.raises(SandboxError, match="refused") as caught:
        compiled.read(s3, KEY)
    assert caught.value.limit == "runtime"

    # The loader passes over it and compiles for itself (here: the machine's compile, as a real
    # compile would produce it), and never publishes over the pointer.
    local = DirectoryStore(fresh_environment)
    loaded = compiled.obtain(KEY, lambda: machine_copy, local=local, remote=s3)
    assert loaded.source == "compiled" and loaded.body == machine_copy
    assert compiled.read(local, KEY) == (machine_copy, digest)
    assert (
        clients.s3(REGION).get_object(Bucket=BUCKET, Key=f"{PREFIX}{KEY}/{digest}.cwasm")["Body"].read()
        == planted
    )


def test_a_malformed_or_dangling_pointer_is_refused(s3: S3CompiledCache) -> None:
    s3.put_once("k1/sha256", b"../../etc/passwd")
    with pytest.raises(SandboxError, match="malformed"):
        compiled.read(s3, "k1")
    s3.put_once("k2/sha256", b"0" * 64)
    with pytest.raises(SandboxError, match="missing"):
        compiled.read(s3, "k2")
    assert compiled.read(s3, "k3") is None


def test_both_stores_are_write_once(s3: S3CompiledCache, tmp_path: Path) -> None:
    for store in (s3, DirectoryStore(tmp_path / "cache")):
        assert store.put_once("k/sha256", b"first")
        assert not store.put_once("k/sha256", b"second")
        assert store.get("k/sha256") == b"first"


def test_a_disk_cache_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SandboxError, match="writable by others"):
        DirectoryStore(shared).get("k/sha256")


def test_an_agent_environment_that_finds_the_bucket_empty_asks_the_writer_and_compiles_for_itself(
    s3: S3CompiledCache, machine_copy: bytes, fresh_environment: Path
) -> None:
    asked: list[str] = []
    loaded = compiled.obtain(
        KEY,
        lambda: machine_copy,
        local=DirectoryStore(fresh_environment),
        remote=s3,
        on_miss=lambda: asked.append("precompile"),
    )
    assert loaded.source == "compiled" and asked == ["precompile"]
    # The agent never writes the bucket: only the precompile function does.
    assert s3.get(f"{KEY}/sha256") is None


def test_the_key_names_what_the_compiled_code_depends_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled.cache_key(RUNTIME_SHA256, "aarch64") != compiled.cache_key(RUNTIME_SHA256, "x86_64")
    before = compiled.cache_key(RUNTIME_SHA256)
    monkeypatch.setitem(compiled.ENGINE_SETTINGS, "max_wasm_stack", 1 << 21)
    assert compiled.cache_key(RUNTIME_SHA256) != before
    assert "wasmtime50" in before and RUNTIME_SHA256[:16] in before


def test_an_unreachable_bucket_costs_the_environment_a_compile_not_the_call(
    s3: S3CompiledCache, machine_copy: bytes, fresh_environment: Path
) -> None:
    # A bucket that is not there (or a grant that refuses): the loader passes over it.
    gone = S3CompiledCache("no-such-sandbox-cache", region=REGION)
    loaded = compiled.obtain(KEY, lambda: machine_copy, local=DirectoryStore(fresh_environment), remote=gone)
    assert loaded.source == "compiled" and loaded.body == machine_copy
