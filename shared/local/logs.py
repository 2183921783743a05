"""One-line, key=value logs for the local gateway (the Lambda functions use powertools' JSON)."""

from __future__ import annotations

import logging
import sys

# Attributes every LogRecord has; anything else on a record came from `extra=` and is printed.
# uvicorn adds `color_message`, a copy of the message with terminal colours.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = self.formatTime(record, "%H:%M:%S")
        base = f"{when} {record.levelname:<5} {record.name}: {record.getMessage()}"
        extras = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        line = f"{base} {extras}" if extras else base
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Access logs would print every poll of the outbox; the turn line is the one that matters.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
