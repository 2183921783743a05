"""One-line, key=value logs for the local gateway (the Lambda functions use powertools' JSON),
each with the correlation id of the request or turn it belongs to (shared.correlation)."""

from __future__ import annotations

import base64
import logging
import secrets
import sys

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import correlation

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
    handler.addFilter(correlation.Stamp())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Access logs would print every poll of the outbox; the turn line is the one that matters.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def request_id() -> str:
    """An id in the shape of API Gateway's requestId (as shared.local.aws_mode.http_front mints)."""
    return base64.b64encode(secrets.token_bytes(10)).decode()


class RequestIds:
    """ASGI middleware: each HTTP request runs under a new correlation id, as the webhook function
    runs under API Gateway's request id; the ingress stamps it on what it queues. The answer
    carries it in `apigw-requestid`, the header an HTTP API answers with."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"apigw-requestid", rid.encode())]
            await send(message)

        # Starlette's run_in_threadpool copies the context, so the sync handlers see the id too.
        with correlation.correlated(rid):
            await self.app(scope, receive, send_with_id)
