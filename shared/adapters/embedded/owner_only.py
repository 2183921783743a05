"""The data directory and its files are their owner's alone: every user's conversations, memory
and secrets are in them.

`mkdir(mode=0o700)` only sets the mode of a directory it creates, and SQLite creates a database
0644 less the umask: a data dir made by an older Sigil, by hand or under a loose umask stays
readable by every local user. So each open tightens what is already there (group and other bits
taken off the directory, every database file and its -wal / -shm / -journal), and a database
file is created 0600 before SQLite opens it (SQLite gives its -wal and -shm the database's mode).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
# The files SQLite keeps beside a database, with the database's contents in them.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def restrict(path: Path) -> None:
    """Take the group's and others' permission bits off `path`, when it exists and has any."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if not mode & 0o077:
        return
    try:
        os.chmod(path, mode & ~0o077)
    except PermissionError:
        # Someone else's file: say so, but a gateway that worked before still starts.
        logger.warning(
            "data file readable by others, and not ours to restrict",
            extra={"path": str(path), "mode": oct(mode)},
        )
        return
    logger.warning("data file was readable by others; restricted to its owner", extra={"path": str(path)})


def open_data_dir(data_dir: Path) -> Path:
    """The data directory, created 0700 or tightened to its owner."""
    path = Path(data_dir).expanduser()
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    restrict(path)
    return path


def private_database(path: Path) -> None:
    """Create the database file `path` empty and 0600 when it is missing (an empty file is an
    empty SQLite database), and tighten it and the files SQLite keeps beside it."""
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))
    for file in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_COMPANIONS)):
        restrict(file)
