"""SecretStore for one machine: a JSON object in a file only its owner can read (mode 0600).

Values never appear in logs, reprs or exception messages; only names do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from shared.adapters.embedded.owner_only import DIR_MODE, FILE_MODE, restrict

logger = logging.getLogger(__name__)


class FileSecretStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileSecretStore({str(self.path)!r})"

    def get(self, name: str) -> str | None:
        return self._read().get(name)

    def ensure(self, name: str) -> str:
        """The secret `name`, created on first use as 32 random bytes, url-safe base64."""
        with self._locked():
            values = self._read()
            value = values.get(name)
            if value is None:
                value = secrets.token_urlsafe(32)
                values[name] = value
                self._write(values)
                logger.info("created secret %s", name)
            return value

    def set(self, name: str, value: str) -> None:
        with self._locked():
            values = self._read()
            values[name] = value
            self._write(values)

    def delete(self, name: str) -> None:
        with self._locked():
            values = self._read()
            if values.pop(name, None) is not None:
                self._write(values)

    def names(self) -> list[str]:
        return sorted(self._read())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # The thread lock orders this process's writers; the file lock orders processes (the
        # gateway and a CLI command creating the same secret at once must agree on one value).
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._lock:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _read(self) -> dict[str, str]:
        restrict(self.path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            # The message names the file and position only: the text around an error is a secret.
            raise RuntimeError(f"{self.path} is not valid JSON (line {exc.lineno})") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise RuntimeError(f"{self.path} must hold one JSON object of string values")
        return {str(k): v for k, v in data.items()}

    def _write(self, values: dict[str, str]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # Created 0600 from the start (not chmod-ed after), then renamed over the old file, so
        # neither a reader nor a crash ever sees a half-written or world-readable file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # A leftover temporary file keeps its old mode through O_TRUNC; reset it.
                os.fchmod(fh.fileno(), FILE_MODE)
                json.dump(values, fh, indent=2, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
