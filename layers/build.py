"""Build the Lambda dependency layer from layers/requirements.lock, without Docker.

    python layers/build.py            # layers/build/python, what the stack deploys as the layer
    python layers/build.py --lock     # refresh layers/requirements.lock from pyproject.toml

uv (the version the dev group and the Makefile pin, UV_VERSION) installs the locked wheels for
the Lambda's platform (manylinux, aarch64, CPython PYTHON_VERSION) into a directory instead of the
running interpreter, so this works on any machine with the project's venv and the registry:
`--only-binary :all:` refuses anything that would have to be compiled here (for the wrong
platform), and `--require-hashes` refuses any file whose hash the lock does not list. The
installer is pinned because the venv's own pip is whatever the machine's Python shipped (pip 23
checks a wheel's Requires-Python against the running 3.11, not the target, and refuses numpy 2.5).
The stack's function runtime (infra/constructs/function.py) must name the same Python version: the
layer's compiled extensions only import on that interpreter, and tests/infra checks that the two
agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "layers" / "requirements.lock"
# Requirements a locked package declares but the cloud never imports, dropped from the resolution.
OVERRIDES = ROOT / "layers" / "overrides.txt"
OUT = ROOT / "layers" / "build"
# Written beside python/ so that the stack can refuse a layer built for another interpreter.
MANIFEST = "sigil-layer.json"

PYTHON_VERSION = "3.14"
# Lambda's Python 3.12+ runtimes run on Amazon Linux 2023 (glibc 2.34), so wheels tagged for
# glibc 2.28 load as well as the older manylinux2014 (glibc 2.17) ones, which this platform
# accepts too; some current releases publish aarch64 wheels only for 2.28.
UV_PLATFORM = "aarch64-manylinux_2_28"
# The same pin as pyproject.toml's dev group and the Makefile's venv bootstrap (tests/infra checks).
UV_VERSION = "0.13.9"
ABI_TAG = f"cpython-{PYTHON_VERSION.replace('.', '')}-aarch64-linux-gnu"


def uv() -> str:
    """The venv's uv, refused unless it is the pinned version: another one may resolve or install
    differently from the lock's and the tests' expectations."""
    path = Path(sys.executable).with_name("uv")
    if not path.is_file():
        raise SystemExit(f"no uv beside {sys.executable}: run `make .venv/.synced` first")
    version = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
        [str(path), "--version"], check=True, capture_output=True, text=True
    ).stdout.split()
    if version[1:2] != [UV_VERSION]:
        raise SystemExit(f"{path} is {' '.join(version)}, the layer is built with uv {UV_VERSION}")
    return str(path)


def lock() -> None:
    """Resolve pyproject.toml's cloud core alone (no extras, no groups) for the Lambda platform."""
    cmd = [
        uv(),
        "pip",
        "compile",
        "--quiet",
        # Wheels only, so no interpreter for the target is needed (nor downloaded) to resolve.
        "--no-python-downloads",
        "pyproject.toml",
        "--override",
        str(OVERRIDES.relative_to(ROOT)),
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        UV_PLATFORM,
        "--only-binary",
        ":all:",
        "--generate-hashes",
        "--no-header",
        "-o",
        str(LOCK.relative_to(ROOT)),
    ]
    subprocess.run(cmd, cwd=ROOT, check=True)  # noqa: S603 - a fixed argument list, no shell
    body = LOCK.read_text()
    # uv's own header would record the output path and flags only; this one says how to refresh.
    header = (
        f"# The Lambda layer's dependencies: pyproject.toml's [project.dependencies] alone (no\n"
        f"# extras, no groups) less layers/overrides.txt, resolved for CPython {PYTHON_VERSION} on\n"
        f"# {UV_PLATFORM}, wheels only, with hashes.\n"
        f"# Refresh with `.venv/bin/python layers/build.py --lock` (python-version={PYTHON_VERSION}).\n"
    )
    LOCK.write_text(header + body)


def lock_python_version(text: str) -> str | None:
    match = re.search(r"python-version=(\d+\.\d+)", text)
    return match.group(1) if match else None


def build(out: Path, lock_file: Path = LOCK) -> dict[str, object]:
    """The layer from lock_file into out (python/ and the manifest), replacing what was there."""
    text = lock_file.read_text()
    locked_for = lock_python_version(text)
    if locked_for != PYTHON_VERSION:
        raise SystemExit(
            f"{lock_file.name} was resolved for Python {locked_for}, the layer targets {PYTHON_VERSION}: "
            "run `python layers/build.py --lock` first"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and swap at the end, so a failed build never leaves half a layer
    # behind for the next synth to deploy.
    staging = Path(tempfile.mkdtemp(prefix=".layer-", dir=out.parent))
    try:
        cmd = [
            uv(),
            "pip",
            "install",
            "--quiet",
            # uv reads tags and markers from these, not from the interpreter it runs with.
            "--python",
            sys.executable,
            "--python-platform",
            UV_PLATFORM,
            "--python-version",
            PYTHON_VERSION,
            "--only-binary",
            ":all:",
            "--require-hashes",
            # The lock is complete and resolved for the target, so uv must not re-resolve.
            "--no-deps",
            # Copies, not hard links into uv's cache: the layer is zipped and measured on its own.
            "--link-mode",
            "copy",
            # No .pyc files (uv compiles none unless told): ones made by this interpreter are
            # useless to another Python version and only make the layer bigger.
            "--target",
            str(staging / "python"),
            "-r",
            str(lock_file),
        ]
        subprocess.run(cmd, check=True)  # noqa: S603 - a fixed argument list, no shell
        # Console scripts carry this machine's interpreter path in their shebang: no use in a layer.
        shutil.rmtree(staging / "python" / "bin", ignore_errors=True)
        _check_extensions(staging / "python")
        manifest: dict[str, object] = {
            "python_version": PYTHON_VERSION,
            "platform": UV_PLATFORM,
            "installer": f"uv {UV_VERSION}",
            "lock_sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _check_extensions(site: Path) -> None:
    """Every shared object must be aarch64 and every CPython extension built for the target ABI.

    The installer's platform tags make this true for well-formed wheels; the check catches a wheel that
    ships a binary for another machine, which would otherwise fail only at import on Lambda.
    """
    problems = []
    for path in site.rglob("*.so*"):
        if not path.is_file():
            continue
        with path.open("rb") as f:
            header = f.read(20)
        # ELF: magic, then e_machine (little-endian u16) at offset 18; 183 is EM_AARCH64.
        if header[:4] != b"\x7fELF" or int.from_bytes(header[18:20], "little") != 183:
            problems.append(f"{path.relative_to(site)} is not an aarch64 ELF object")
        elif ".cpython-" in path.name and ABI_TAG not in path.name:
            problems.append(f"{path.relative_to(site)} is built for another interpreter")
    if problems:
        raise SystemExit("the layer would not load on Lambda:\n  " + "\n  ".join(problems[:10]))


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lock", action="store_true", help="refresh layers/requirements.lock and stop")
    parser.add_argument("--out", type=Path, default=OUT, help="layer directory (default: layers/build)")
    args = parser.parse_args(argv)
    if args.lock:
        lock()
        return
    started = time.monotonic()
    manifest = build(args.out)
    print(
        f"layer for Python {manifest['python_version']} in {args.out}: "
        f"{_size(args.out) / 2**20:.0f} MiB in {time.monotonic() - started:.1f} s"
    )


if __name__ == "__main__":
    main()
