"""Build the Lambda dependency layer from layers/requirements.lock, without Docker.

    python layers/build.py            # layers/build/python, what the stack deploys as the layer
    python layers/build.py --lock     # refresh layers/requirements.lock from pyproject.toml

pip installs the locked wheels for the Lambda's platform (manylinux, aarch64, CPython
PYTHON_VERSION) into a directory instead of the running interpreter, so this works on any
machine with pip and the registry: `--only-binary=:all:` refuses anything that would have to
be compiled here (for the wrong platform), and `--require-hashes` refuses any file whose hash
the lock does not list. The stack's function runtime (infra/constructs/function.py) must name
the same Python version: the layer's compiled extensions only import on that interpreter, and
tests/infra checks that the two agree.
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
OUT = ROOT / "layers" / "build"
# Written beside python/ so that the stack can refuse a layer built for another interpreter.
MANIFEST = "sigil-layer.json"

PYTHON_VERSION = "3.14"
# Lambda's Python 3.12+ runtimes run on Amazon Linux 2023 (glibc 2.34), so wheels tagged for
# glibc 2.28 load as well as the older manylinux2014 (glibc 2.17) ones; some current releases
# (apsw) publish aarch64 wheels only for 2.28.
PIP_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
UV_PLATFORM = "aarch64-manylinux_2_28"
ABI_TAG = f"cpython-{PYTHON_VERSION.replace('.', '')}-aarch64-linux-gnu"


def lock() -> None:
    """Resolve pyproject.toml's runtime dependencies (no dev group) for the Lambda platform."""
    uv = Path(sys.executable).with_name("uv")
    cmd = [
        str(uv),
        "pip",
        "compile",
        "--quiet",
        # Wheels only, so no interpreter for the target is needed (nor downloaded) to resolve.
        "--no-python-downloads",
        "pyproject.toml",
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
        f"# The Lambda layer's dependencies: pyproject.toml's runtime dependencies, resolved for\n"
        f"# CPython {PYTHON_VERSION} on {UV_PLATFORM}, wheels only, with hashes.\n"
        f"# Refresh with `.venv/bin/python layers/build.py --lock` (python-version={PYTHON_VERSION}).\n"
    )
    LOCK.write_text(header + body)


def lock_python_version(text: str) -> str | None:
    match = re.search(r"python-version=(\d+\.\d+)", text)
    return match.group(1) if match else None


def build(out: Path) -> dict[str, object]:
    text = LOCK.read_text()
    locked_for = lock_python_version(text)
    if locked_for != PYTHON_VERSION:
        raise SystemExit(
            f"{LOCK.name} was resolved for Python {locked_for}, the layer targets {PYTHON_VERSION}: "
            "run `python layers/build.py --lock` first"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and swap at the end, so a failed build never leaves half a layer
    # behind for the next synth to deploy.
    staging = Path(tempfile.mkdtemp(prefix=".layer-", dir=out.parent))
    try:
        platforms = [arg for p in PIP_PLATFORMS for arg in ("--platform", p)]
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *platforms,
            "--implementation",
            "cp",
            "--python-version",
            PYTHON_VERSION,
            "--only-binary=:all:",
            "--require-hashes",
            # The lock is complete and resolved for the target, so pip must not re-resolve.
            "--no-deps",
            # pip would compile .pyc files with *this* interpreter; they are useless to another
            # Python version and only make the layer bigger.
            "--no-compile",
            "--target",
            str(staging / "python"),
            "-r",
            str(LOCK),
        ]
        subprocess.run(cmd, check=True)  # noqa: S603 - a fixed argument list, no shell
        # Console scripts carry this machine's interpreter path in their shebang: no use in a layer.
        shutil.rmtree(staging / "python" / "bin", ignore_errors=True)
        _check_extensions(staging / "python")
        manifest = {
            "python_version": PYTHON_VERSION,
            "platforms": list(PIP_PLATFORMS),
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

    pip's platform tags make this true for well-formed wheels; the check catches a wheel that
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
