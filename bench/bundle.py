"""What ships to Lambda, at two revisions side by side: the layer, each function's bundle, and each
handler's cold import.

    .venv/bin/python bench/bundle.py                      # deeb990 (before the house) against HEAD
    .venv/bin/python bench/bundle.py --before A --after B --runs 5

Each revision is exported with `git archive` into a temporary directory (nothing in the checkout
changes, any checkout works). Its layer is built from its own layers/requirements.lock by this
checkout's layers/build.py, so both go through the same pinned installer (uv). Its three functions
are bundled by its own bundler (infra/constructs/function.py), exactly as its `cdk synth` would.

Cold imports: the layer is built for aarch64 and CPython 3.14 and cannot load here, so each
handler is imported from its bundle over this machine's venv site-packages instead, in a fresh
`python -I -S` per run (no .pth files, so the checkout's own shared/ never leaks in), timing
`import handler` alone in CPU time (this machine's cores are shared, and wall time would measure
the neighbours). One discarded run first writes the bundle's .pyc files, which every later run
reuses; the table gives the median of --runs. Sizes are apparent sizes (what a zip holds), in MiB.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ("webhook", "agent", "consolidate")
BEFORE = "deeb990"

BUNDLE_SCRIPT = """
import sys
from pathlib import Path

from aws_cdk import DockerImage

from infra.constructs.function import FUNCTIONS_DIR, _HandlerWithShared

for source, out in zip(sys.argv[1::2], sys.argv[2::2]):
    _HandlerWithShared(FUNCTIONS_DIR / source).try_bundle(out, image=DockerImage.from_registry("unused"))
"""

IMPORT_SCRIPT = """
import sys, time
sys.path[:0] = [sys.argv[1]]
sys.path.append(sys.argv[2])
started = time.process_time()
import handler
print(time.process_time() - started)
"""


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout  # noqa: S603, S607 - fixed git arguments


def _export(rev: str, into: Path) -> str:
    """The revision's tree into `into`; returns its short commit id."""
    commit = _git("rev-parse", "--short", f"{rev}^{{commit}}").decode().strip()
    with tarfile.open(fileobj=io.BytesIO(_git("archive", "--format=tar", commit))) as tar:
        tar.extractall(into, filter="data")
    return commit


def _layer_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layer_build", ROOT / "layers" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def _bundle(src: Path, outs: dict[str, Path]) -> None:
    args = [str(a) for source, out in outs.items() for a in (source, out)]
    # The revision's own infra/ and shared/ come first on the path: its bundler, its ROOT.
    subprocess.run([sys.executable, "-c", BUNDLE_SCRIPT, *args], cwd=src, check=True, capture_output=True)  # noqa: S603 - a fixed script


def _cold_import_ms(bundle: Path, runs: int) -> float:
    site = sysconfig.get_paths()["purelib"]
    env = {"AWS_DEFAULT_REGION": "eu-west-1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    cmd = [sys.executable, "-I", "-S", "-c", IMPORT_SCRIPT, str(bundle), site]
    times = []
    for _ in range(runs + 1):
        done = subprocess.run(cmd, cwd=bundle, env=env, check=True, capture_output=True, text=True)  # noqa: S603 - a fixed script
        times.append(float(done.stdout.split()[-1]) * 1000)
    return statistics.median(times[1:])


def measure(rev: str, work: Path, runs: int) -> dict[str, object]:
    src = work / "src"
    src.mkdir(parents=True)
    commit = _export(rev, src)
    started = time.monotonic()
    layer = work / "layer"
    _layer_builder().build(layer, src / "layers" / "requirements.lock")
    layer_s = time.monotonic() - started
    outs = {source: work / "bundles" / source for source in FUNCTIONS}
    _bundle(src, outs)
    bundles = {source: _mib(out) for source, out in outs.items()}
    files = {source: sum(1 for p in out.rglob("*.py")) for source, out in outs.items()}
    imports = {source: _cold_import_ms(out, runs) for source, out in outs.items()}
    return {
        "rev": rev,
        "commit": commit,
        "layer_mib": _mib(layer / "python"),
        "layer_s": layer_s,
        "bundle_mib": bundles,
        "bundle_files": files,
        "import_ms": imports,
    }


def table(before: dict[str, object], after: dict[str, object]) -> str:
    def row(name: str, a: object, b: object, fmt: str) -> str:
        return f"| {name} | {a:{fmt}} | {b:{fmt}} |"

    head = [f"{r['rev']} ({r['commit']})" for r in (before, after)]
    lines = [
        f"| measure | before: {head[0]} | after: {head[1]} |",
        "|---|---:|---:|",
        row("layer, python/ (MiB)", before["layer_mib"], after["layer_mib"], ".1f"),
    ]
    for key, label, fmt in (
        ("bundle_mib", "bundle (MiB)", ".2f"),
        ("bundle_files", "bundle (.py files)", "d"),
        ("import_ms", "cold `import handler` (CPU ms, median)", ".0f"),
    ):
        b, a = before[key], after[key]
        assert isinstance(b, dict) and isinstance(a, dict)
        lines += [row(f"{source}: {label}", b[source], a[source], fmt) for source in FUNCTIONS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default=BEFORE, help=f"the earlier revision (default {BEFORE})")
    parser.add_argument("--after", default="HEAD", help="the later revision (default HEAD)")
    parser.add_argument("--runs", type=int, default=5, help="timed imports per function (default 5)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON as well")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sigil-bundle-bench-"))
    try:
        results = [
            measure(rev, work / name, args.runs) for name, rev in (("a", args.before), ("b", args.after))
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(*results))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
