"""API Gateway's WebSocket API, as `sigil dev --aws` stands it in: browser sockets on `/ws`, each
handshake, frame and close turned into the event the real ws function takes, and the management
API's posts (shared.local.aws_mode.management_api) written back to the socket they name.

The page speaks the same protocol to `sigil dev` and here (`/ws?token=...`, docs/web-channel.md);
only what runs behind it differs: here it is functions/ws and functions/agent over moto, as in
the cloud. A $connect the function answers with anything but 200 fails the handshake (HTTP 403,
as API Gateway refuses one), so the browser sees what it would see in the cloud.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from shared.local.aws_mode.http_front import _request_time
from shared.local.aws_mode.management_api import ManagementApi
from shared.local.lambda_runtime import FunctionPool, InvocationError

log = logging.getLogger("sigil.aws_mode")

_EVENT_TYPES = {"$connect": "CONNECT", "$disconnect": "DISCONNECT", "$default": "MESSAGE"}
# How long a post waits for the socket to take its frame before the management API answers.
SEND_TIMEOUT_S = 10.0


def ws_event(
    route_key: str,
    connection_id: str,
    *,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    body: str | None = None,
    source_ip: str = "127.0.0.1",
    stage: str = "local",
    api_id: str = "local",
    now: float | None = None,
) -> dict[str, Any]:
    """The WebSocket API's event for a route (events/ws_connect.json, ws_send.json, ws_disconnect.json)."""
    epoch = time.time() if now is None else now
    request_id = base64.b64encode(secrets.token_bytes(10)).decode()
    host = (headers or {}).get("host", "localhost")
    event: dict[str, Any] = {
        "requestContext": {
            "routeKey": route_key,
            "eventType": _EVENT_TYPES[route_key],
            "extendedRequestId": request_id,
            "requestTime": _request_time(epoch),
            "messageDirection": "IN",
            "stage": stage,
            "connectedAt": int(epoch * 1000),
            "requestTimeEpoch": int(epoch * 1000),
            "identity": {"sourceIp": source_ip},
            "requestId": request_id,
            "domainName": host,
            "connectionId": connection_id,
            "apiId": api_id,
        },
        "isBase64Encoded": False,
    }
    if route_key != "$default":
        event["headers"] = dict(headers or {})
        event["multiValueHeaders"] = {k: [v] for k, v in (headers or {}).items()}
    if route_key == "$connect" and query:
        event["queryStringParameters"] = dict(query)
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    if route_key == "$default":
        event["requestContext"]["messageId"] = request_id
        event["body"] = body or ""
    return event


class WsFront:
    """`/ws`: one browser socket per connection id, as API Gateway keeps them."""

    def __init__(self, ws: FunctionPool, management: ManagementApi) -> None:
        self.ws = ws
        self.management = management

    def route(self, path: str = "/ws") -> WebSocketRoute:
        return WebSocketRoute(path, self._socket)

    async def _invoke(self, event: dict[str, Any]) -> int:
        try:
            result = await run_in_threadpool(self.ws.invoke, event)
        except InvocationError as exc:
            log.error(
                "ws function failed",
                extra={"route": event["requestContext"]["routeKey"], "error": exc.error_type},
            )
            return 500
        return int(result.get("statusCode", 200)) if isinstance(result, dict) else 200

    async def _socket(self, socket: WebSocket) -> None:
        connection_id = base64.b64encode(secrets.token_bytes(10)).decode()
        headers = {k: v for k, v in socket.headers.items()}
        source_ip = socket.client.host if socket.client else "127.0.0.1"
        connect = ws_event(
            "$connect", connection_id, query=dict(socket.query_params), headers=headers, source_ip=source_ip
        )
        if await self._invoke(connect) != 200:
            await socket.close(code=1008)  # before accept: the handshake fails with HTTP 403
            return
        await socket.accept()
        loop = asyncio.get_running_loop()

        def deliver(data: bytes) -> None:
            # Called on the management API's thread: the frame goes out on the socket's own loop.
            future = asyncio.run_coroutine_threadsafe(socket.send_text(data.decode()), loop)
            future.result(timeout=SEND_TIMEOUT_S)

        def hang_up() -> None:
            # API Gateway closes a deleted connection; the code is not the server's to choose.
            future = asyncio.run_coroutine_threadsafe(socket.close(code=1000), loop)
            future.result(timeout=SEND_TIMEOUT_S)

        self.management.open(connection_id, deliver, hang_up)
        try:
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text")
                if raw is None:
                    raw = (message.get("bytes") or b"").decode("utf-8", errors="replace")
                await self._invoke(ws_event("$default", connection_id, body=raw, source_ip=source_ip))
        except WebSocketDisconnect:
            pass
        finally:
            self.management.close(connection_id)
            await self._invoke(ws_event("$disconnect", connection_id, headers=headers, source_ip=source_ip))
