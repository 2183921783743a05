"""run_python's sandbox (docs/sandbox.md): the compile against the compiled-module caches (S3 on
moto, the disk), cold and warm starts, what a 1,000,000-fuel script takes, per-call memory, and
the Lambda layer's size before (main's lock) and after (this one).

    python bench/sandbox.py [--no-layer] [--no-compile]

A new execution environment's first run_python pays one of three loads before its cold start:
the compile (no cache anywhere), the S3 cache (download, SHA-256 check, kept on disk,
deserialize) or the disk cache (the same environment's next process, or `sigil dev` again).

Cold: a new instance (compiled module loaded from the cache, CPython started, the exposed modules
imported) and a one-line script. Warm: the instance was pre-warmed, as while a model call is in
flight. The layer is built for aarch64 by layers/build.py from each lock (downloads once per
wheel into uv's cache) and compared with Lambda's 250 MB unzipped limit (layers + function).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.models import SPEC_001_FUEL, SandboxConfig  # noqa: E402
from shared.sandbox import compiled  # noqa: E402
from shared.sandbox.wasm import RUNTIME_SHA256, WasmExecutor, compile_runtime, load_module, module  # noqa: E402

LAMBDA_UNZIPPED_MB = 250
RUNS = 7
# A loop that runs until its fuel is gone: the wall time a full 1,000,000-unit budget takes.
SPIN = "while True:\n    pass"


def _host(op: str, args: dict[str, Any]) -> Any:
    return []


def _median(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def sandbox_table() -> None:
    started = time.perf_counter()
    module()
    load_ms = (time.perf_counter() - started) * 1000
    limits = SandboxConfig(enabled=True)
    spec = limits.model_copy(update={"fuel": SPEC_001_FUEL})
    ex = WasmExecutor()
    cold, warm, spin, mem = [], [], [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        ex.run("print(1)", inputs={}, limits=limits, host=_host)
        cold.append(time.perf_counter() - t)
        ex.prewarm()
        time.sleep(1.5)  # the model call this hides behind
        t = time.perf_counter()
        run = ex.run("print(1)", inputs={}, limits=limits, host=_host)
        warm.append(time.perf_counter() - t)
        mem.append(run.memory_bytes)
        ex.prewarm()
        time.sleep(1.5)
        try:
            ex.run(SPIN, inputs={}, limits=spec, host=_host)
        except Exception as exc:  # noqa: BLE001 -- the fuel limit is the point
            spin.append(float(getattr(exc, "used", {}).get("wall_s", 0)))
    ex.close()
    print("| measure | median |")
    print("|---|---|")
    print(f"| compiled module load (cache on disk) | {load_ms:.0f} ms |")
    print(f"| cold start + one-line script | {_median(cold):.0f} ms |")
    print(f"| warm (pre-warmed) one-line script | {_median(warm):.1f} ms |")
    print(f"| 1,000,000-fuel script, wall time | {_median(spin):.1f} ms |")
    print(f"| per-call linear memory | {statistics.median(mem) / 2**20:.1f} MiB |")


def cache_table(*, compile_now: bool) -> None:
    from moto import mock_aws

    from shared.adapters.aws import clients
    from shared.adapters.aws.sandbox_cache import S3CompiledCache

    key = compiled.cache_key(RUNTIME_SHA256)
    rows = []
    if compile_now:
        t = time.perf_counter()
        body = compile_runtime()
        rows.append(("compile (no cache anywhere)", time.perf_counter() - t))
    else:
        _, loaded = load_module(None)
        body = loaded.body
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        clients.reset()
        clients.s3("us-east-1").create_bucket(Bucket="bench-sandbox-cache")
        store = S3CompiledCache("bench-sandbox-cache", region="us-east-1")
        compiled.write(store, key, body)
        s3_s, disk_s = [], []
        for n in range(RUNS):
            env = compiled.DirectoryStore(Path(tmp) / f"env{n}")
            t = time.perf_counter()
            _, loaded = load_module(store, local=env)  # a new environment: nothing on its disk
            s3_s.append(time.perf_counter() - t)
            assert loaded.source == "remote"
            t = time.perf_counter()
            _, loaded = load_module(store, local=env)  # its next process: on its disk
            disk_s.append(time.perf_counter() - t)
            assert loaded.source == "local"
        clients.reset()
    rows += [("S3 cache (moto): get, SHA-256, keep on disk, deserialize", statistics.median(s3_s))]
    rows += [("disk cache: read, SHA-256, deserialize", statistics.median(disk_s))]
    print(f"\n| load of the compiled runtime ({len(body) / 2**20:.1f} MiB serialized) | median |")
    print("|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1000:,.0f} ms |")


def _mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def layer_table() -> None:
    spec = importlib.util.spec_from_file_location("layer_build", ROOT / "layers" / "build.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    with tempfile.TemporaryDirectory() as tmp:
        before_lock = Path(tmp) / "before.lock"
        before_lock.write_bytes(
            subprocess.check_output(["git", "show", "main:layers/requirements.lock"], cwd=ROOT)  # noqa: S607 - fixed git arguments
        )
        sizes = {}
        for name, lock in (("main", before_lock), ("this branch", ROOT / "layers" / "requirements.lock")):
            out = Path(tmp) / name.replace(" ", "_")
            build.build(out, lock)
            sizes[name] = _mib(out / "python")
    print("\n| layer (aarch64, unzipped) | MiB | of Lambda's 250 MB |")
    print("|---|---|---|")
    for name, mib in sizes.items():
        print(f"| {name} | {mib:.1f} | {mib * 2**20 / 1e6 / LAMBDA_UNZIPPED_MB:.0%} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-layer", action="store_true")
    parser.add_argument("--no-compile", action="store_true", help="skip the ~30 s compile")
    args = parser.parse_args()
    sandbox_table()
    cache_table(compile_now=not args.no_compile)
    if not args.no_layer:
        layer_table()
