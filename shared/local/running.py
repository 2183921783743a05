"""Where the running `sigil dev` is: a small record in its data directory, for the other commands.

`sigil dev` (either mode) writes `<data dir>/gateway.json` once it is listening: its pid, the
address clients reach it at (the port it really bound, so `--port 0` works too), and under
`--aws` where its moto stores are, as a deployed stack's outputs would say. `sigil send`,
`replies` and `web open` read the address from it, and every command that takes `--stack` reaches
the running `sigil dev --aws`'s stores through it (shared.cli._app), so neither the address nor
the stores need repeating. The record is removed when the gateway stops; one left behind by a
killed gateway names a pid that is gone and is ignored. The data directory's lock
(shared.local.datadir_lock) keeps it to one gateway per directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

RECORD_FILE = "gateway.json"
# What moto accepts; a real profile in the environment must not be sent to it (or leak there).
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class LocalStack(BaseModel):
    """A running `sigil dev --aws`'s stores: moto's endpoint and region, and the Settings values a
    deployed stack's outputs would fill (shared.cli._app.STACK_OUTPUTS)."""

    endpoint: str
    region: str
    settings: dict[str, str]


class GatewayRecord(BaseModel):
    pid: int
    url: str  # where clients reach it: http://host:port
    mode: Literal["embedded", "aws"]
    aws: LocalStack | None = None


def listen(host: str, port: int) -> socket.socket:
    """The gateway's bound socket (uvicorn serves on it); OSError names the address if taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: a restart may reuse the port while old connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def client_url(sock: socket.socket) -> str:
    """The URL a client on this machine reaches the socket at: a wildcard bind is reached on
    loopback, and the port is the one bound (not 0)."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):  # noqa: S104 - comparing, not binding
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def write_record(data_dir: Path, record: GatewayRecord) -> None:
    """Atomically (a reader never sees half a record); readable by the owner only, as the data
    directory's other files."""
    path = Path(data_dir) / RECORD_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(record.model_dump_json(indent=2))
    os.replace(tmp, path)


def remove_record(data_dir: Path) -> None:
    """On stop; only this process's own record (a later gateway's is left alone)."""
    found = _read(Path(data_dir) / RECORD_FILE)
    if found is not None and found.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (Path(data_dir) / RECORD_FILE).unlink()


def running_gateway(data_dir: Path) -> GatewayRecord | None:
    """The record of the `sigil dev` running on `data_dir`, or None when none is."""
    found = _read(Path(data_dir) / RECORD_FILE)
    return found if found is not None and _alive(found.pid) else None


def _read(path: Path) -> GatewayRecord | None:
    try:
        return GatewayRecord.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None  # none, or not one this version wrote: as if no gateway ran


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def local_stack_environment(stack: LocalStack) -> dict[str, str]:
    """The variables that point this process's AWS clients (shared.adapters.aws.clients, boto3's
    credential chain) at the running mode's moto server."""
    return {"AWS_ENDPOINT_URL": stack.endpoint, "AWS_REGION": stack.region, **LOCAL_CREDENTIALS}
