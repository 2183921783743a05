"""`sigil dev` claims its data directory and its port before it takes back in-flight items.

A second instance on the same directory, or one that cannot bind its port, must exit without
touching the queue: taking back an item in flight there would run another gateway's turn (and
call its model) a second time.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from shared.adapters.embedded import Database, SqliteLanes
from shared.channels import web
from shared.models import LaneItem
from tests.e2e.conftest import ROOT, START_TIMEOUT_S, STARTED_GROUPS, DevGateway, gateway_env
from tests.e2e.processes import kill_group


def _run_to_exit(data_dir: Path, port: int) -> tuple[int, str]:
    """Run `sigil dev` expecting it to give up on its own: its exit code and its output."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "sigil"), "dev", "--data-dir", str(data_dir), "--port", str(port)],
        cwd=ROOT,
        env=gateway_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    STARTED_GROUPS.add(proc.pid)
    try:
        output, _ = proc.communicate(timeout=START_TIMEOUT_S)
    finally:
        kill_group(proc.pid)
        proc.wait()
    STARTED_GROUPS.discard(proc.pid)
    return proc.returncode, output


def _inflight_item(data_dir: Path) -> None:
    """Queue one web message and claim it, as a gateway does when its turn starts."""
    data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(data_dir / "queue.db")
    try:
        lanes = SqliteLanes(db)
        body = b'{"event_id": "e1", "session": "s1", "user": "u1", "text": "hello"}'
        lanes.submit(LaneItem(inbound=web.parse("default", body)))
        [head] = lanes._heads()
        assert lanes._claim(head.seq, max_attempts=5) is not None
    finally:
        db.close()


def _statuses(data_dir: Path) -> list[str]:
    db = Database(data_dir / "queue.db")
    try:
        return [h.status for h in SqliteLanes(db)._heads()]
    finally:
        db.close()


def test_a_second_instance_on_the_same_data_dir_and_port_exits_naming_the_first(
    gateway: DevGateway,
) -> None:
    # Given a running gateway, when a second one is started on its data directory and port
    assert gateway.proc is not None
    code, output = _run_to_exit(gateway.data_dir, gateway.port)
    # Then the second exits at once, saying which directory is held and by which process
    assert code != 0
    assert f"data directory {gateway.data_dir.resolve()} is in use" in output
    assert f"(pid {gateway.proc.pid})" in output
    # And the first goes on serving
    assert gateway.post("still here", event_id="after-second").status_code == 202
    [reply] = gateway.wait_replies(1)
    assert reply["text"] == "still here"


def test_a_gateway_that_cannot_bind_its_port_exits_before_taking_back_in_flight_items(
    tmp_path: Path,
) -> None:
    # Given a data directory whose queue holds an item in flight, and its port held by another server
    data_dir = tmp_path / "state"
    _inflight_item(data_dir)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        # When `sigil dev` is started there
        code, output = _run_to_exit(data_dir, port)
    # Then it exits naming the address, and the item it could not serve is left as it was
    assert code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in output
    assert _statuses(data_dir) == ["inflight"]
