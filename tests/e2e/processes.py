"""The processes an e2e test starts, found by process group, so that none outlives the suite.

Each `sigil dev` is started as the leader of its own session and process group; everything it
starts (osmem-server, the Lambda containers, multiprocessing's resource tracker) stays in that
group even once orphaned, which a walk of the pytest process's descendants would miss.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    args: str


def live_processes() -> list[Proc]:
    """Every process on the machine that has not exited (zombies are dead, and left out)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return _from_ps()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # exited while being read
        # The command name is in parentheses and may itself hold spaces or parentheses.
        state, ppid, pgid = stat.rsplit(")", 1)[1].split()[:3]
        if state in ("Z", "X"):
            continue
        args = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        found.append(Proc(int(entry.name), int(ppid), int(pgid), args))
    return found


def _from_ps() -> list[Proc]:
    # Where there is no /proc (macOS), ps gives the same columns.
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,pgid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        pid, ppid, pgid, stat, *args = line.split(None, 4)
        if not stat.startswith("Z"):
            found.append(Proc(int(pid), int(ppid), int(pgid), " ".join(args)))
    return found


def in_groups(groups: set[int]) -> list[Proc]:
    return [p for p in live_processes() if p.pgid in groups]


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; a group already empty is not an error."""
    # PermissionError: macOS answers so for a group whose members have all exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
