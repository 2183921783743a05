"""From `git clone` to a first reply, on an empty package cache: what a new user waits for.

    .venv/bin/python bench/first_reply.py [--repo PATH]

Each step is timed on this machine, as a new user would run it (README.md):
1. `git clone` of the repository (a local path: the network part of a clone is the host's).
2. The install `make dev` does (its `.venv/.synced-run` target), with pip's and uv's caches
   pointed at new empty directories, so every package is downloaded from the registry.
3. `sigil dev` from the clone, until it accepts connections.
4. The first reply: `sigil send "hello" --wait` answered by the model. The model is the fake
   OpenAI-compatible server of tests/support (run by this script's interpreter, not the clone's),
   so the time is the gateway's and not a provider's.

It prints a table of the steps and the size of what `make dev` installed into the clone's .venv,
then removes the clone. A benchmark, not a test: it fails only if a step does not work at all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.fake_openai import FakeOpenAI  # noqa: E402 - after the path above


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _timed(label: str, rows: list[tuple[str, float]], command: list[str], **kwargs: object) -> None:
    start = time.perf_counter()
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]  # noqa: S603 - fixed commands
    rows.append((label, time.perf_counter() - start))


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise SystemExit(f"sigil dev exited with {process.returncode} before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"sigil dev did not listen on {port} within {timeout_s:.0f} s")


def run(repo: Path) -> None:
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="sigil-first-reply-") as tmp:
        work = Path(tmp)
        clone = work / "sigil"
        caches = {"PIP_CACHE_DIR": str(work / "pip-cache"), "UV_CACHE_DIR": str(work / "uv-cache")}
        env = {**os.environ, **caches}
        _timed("git clone", rows, ["git", "clone", "-q", str(repo), str(clone)])
        _timed("install (make dev's)", rows, ["make", "-s", ".venv/.synced-run"], cwd=clone, env=env)
        venv_bytes = _size(clone / ".venv")
        port = _free_port()
        with FakeOpenAI() as model:
            gateway_env = {
                **env,
                "SIGIL_MODEL": "openai/fake-model",
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "sk-local",
            }
            start = time.perf_counter()
            gateway = subprocess.Popen(  # noqa: S603 - the clone's own sigil
                [str(clone / ".venv/bin/sigil"), "dev", "--port", str(port)],
                cwd=clone,
                env=gateway_env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                _wait_for_port(port, gateway, timeout_s=120)
                rows.append(("sigil dev listening", time.perf_counter() - start))
                start = time.perf_counter()
                send = ["send", "hello", "--session", "first", "--wait", "--url", f"http://127.0.0.1:{port}"]
                reply = subprocess.run(  # noqa: S603 - the clone's own sigil
                    [str(clone / ".venv/bin/sigil"), *send],
                    cwd=clone,
                    env=gateway_env,
                    capture_output=True,
                    text=True,
                    timeout=180,
                    check=True,
                )
                rows.append(("first reply (send --wait)", time.perf_counter() - start))
            finally:
                gateway.terminate()
                gateway.wait(timeout=30)
        if "hello" not in reply.stdout.splitlines()[-1]:
            raise SystemExit(f"the first reply is not the model's: {reply.stdout!r}")
        shutil.rmtree(clone, ignore_errors=True)

    width = max(len(label) for label, _ in rows)
    print(f"{'step':<{width}}  {'seconds':>8}")
    for label, seconds in rows:
        print(f"{label:<{width}}  {seconds:8.1f}")
    print(f"{'clone to first reply':<{width}}  {sum(s for _, s in rows):8.1f}")
    print(f"\nwhat make dev installs: {venv_bytes / 2**20:,.0f} MiB in .venv (requirements-run.lock)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository to clone (default: this one)")
    run(parser.parse_args().repo)


if __name__ == "__main__":
    main()
