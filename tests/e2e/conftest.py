"""The real `sigil dev` process, talked to over HTTP, with a local OpenAI-wire server as its model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from shared.channels import web
from tests.support.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


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

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DevGateway:
        log = (self.data_dir.parent / f"gateway-{len(self.output)}.log").open("w")
        self.proc = subprocess.Popen(
            [
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
        )
        self.output.append(log.name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sigil dev exited: {Path(log.name).read_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("sigil dev did not become healthy")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

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

    def wait_replies(self, n: int, session: str = "s1", timeout: float = 30) -> list[dict[str, object]]:
        deadline = time.monotonic() + timeout
        replies = self.outbox(session)
        while len(replies) < n and time.monotonic() < deadline:
            time.sleep(0.1)
            replies = self.outbox(session)
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
