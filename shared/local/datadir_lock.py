"""One `sigil dev` per data directory: an exclusive flock on `gateway.lock` inside it.

The embedded lanes assume a single consumer: at start the runner takes back every item left in
flight, on the assumption that whoever claimed it is gone. A second gateway on the same
directory would take the first one's running turns and call the model for them again, so the
gateway holds this lock before it recovers anything. The kernel drops the lock when the process
dies, however it dies, so a crash never leaves a stale lock behind; the file itself stays (it is
never deleted, which would let two processes lock two different files of the same name).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "gateway.lock"


class DataDirInUse(RuntimeError):
    """Another live process holds the data directory."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        self.data_dir = data_dir
        super().__init__(
            f"data directory {data_dir} is in use by another sigil dev (pid {holder}); "
            "stop that one first, or pass another --data-dir"
        )


class DataDirLock:
    """Held from acquire() until release() or the end of the process."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise DataDirInUse naming the holder's pid; a no-op when held."""
        if self._fd is not None:
            return
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            # Empty while the holder is between taking the lock and writing its pid.
            raise DataDirInUse(self.data_dir, holder or "unknown") from None
        except BaseException:
            os.close(fd)
            raise
        # The pid is for the message a second instance prints; the lock is the flock alone.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor drops the flock
