"""API Gateway (HTTP API, payload 2.0): each request as the v2 event, the function's answer as HTTP."""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.local.lambda_runtime import ACCOUNT_ID, FunctionPool, InvocationError

log = logging.getLogger("sigil.aws_mode")

# The webhook's routes, as API Gateway names them (infra/constructs/ingress.py, web channel only).
POST_WEB: Final = "POST /webhooks/web/{workspace}"
GET_OUTBOX: Final = "GET /sessions/{workspace}/{session}/outbox"
# The chat page, served by the webhook function as in the cloud (shared.channels.web_page).
PAGE_ROUTES: Final = ("GET /", "GET /config.json", "GET /assets/{name}")
# The chat page's uploads: the slot (a presigned POST to the media bucket) and its confirmation.
UPLOAD_SLOT: Final = "POST /media/{workspace}/uploads"
UPLOAD_CONFIRM: Final = "POST /media/{workspace}/uploads/{media_id}"
PLATFORM_CHANNELS: Final = ("telegram", "slack", "discord", "whatsapp")

_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _request_time(epoch_s: float) -> str:
    t = time.gmtime(epoch_s)
    # Spelled out rather than %b: API Gateway writes English month names whatever the locale.
    month = _MONTHS[t.tm_mon - 1]
    return f"{t.tm_mday:02d}/{month}/{t.tm_year}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def http_api_event(
    *,
    route_key: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    path_parameters: Mapping[str, str],
    source_ip: str = "127.0.0.1",
    now: float | None = None,
    api_id: str = "local",
) -> dict[str, Any]:
    """The API Gateway HTTP API payload 2.0 event for a request (events/webhook_web.json's shape)."""
    epoch = time.time() if now is None else now
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "cookie":
            # v2 moves cookies out of the headers into their own list.
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        # Repeated headers are joined with commas in v2.
        merged[lower] = f"{merged[lower]},{value}" if lower in merged else value
    host = merged.get("host", "localhost")
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": merged,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": api_id,
            "domainName": host,
            "domainPrefix": host.split(".", 1)[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": base64.b64encode(secrets.token_bytes(10)).decode(),
            "routeKey": route_key,
            "stage": "$default",
            "time": _request_time(epoch),
            "timeEpoch": int(epoch * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if raw_query:
        query: dict[str, str] = {}
        for name, value in parse_qsl(raw_query, keep_blank_values=True):
            query[name] = f"{query[name]},{value}" if name in query else value
        event["queryStringParameters"] = query
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
    return event


def proxy_response(result: Any) -> Response:
    """A function's answer as API Gateway (payload 2.0) turns it into an HTTP response."""
    if not (isinstance(result, dict) and "statusCode" in result):
        # v2 infers the response when the function returns no statusCode: 200 with the JSON.
        return Response(json.dumps(result), status_code=200, media_type="application/json")
    raw = result.get("body") or ""
    body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
    response = Response(body, status_code=int(result["statusCode"]))
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    for cookie in result.get("cookies") or []:
        response.headers.append("set-cookie", cookie)
    return response


class HttpFront:
    """The HTTP API: each route's request, as a v2 event, to the webhook function."""

    def __init__(self, webhook: FunctionPool, *, health: Callable[[], dict[str, Any]]) -> None:
        self.webhook = webhook
        self.health = health

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                *(Route(key.split(" ", 1)[1], self._route(key), methods=["GET"]) for key in PAGE_ROUTES),
                Route("/webhooks/web/{workspace}", self._route(POST_WEB), methods=["POST"]),
                Route("/sessions/{workspace}/{session}/outbox", self._route(GET_OUTBOX), methods=["GET"]),
                Route("/media/{workspace}/uploads", self._route(UPLOAD_SLOT), methods=["POST"]),
                Route("/media/{workspace}/uploads/{media_id}", self._route(UPLOAD_CONFIRM), methods=["POST"]),
                # The platform channels' routes, as the stack's HTTP API declares them.
                *(
                    Route(f"/webhooks/{name}", self._route(f"POST /webhooks/{name}"), methods=["POST"])
                    for name in PLATFORM_CHANNELS
                ),
                Route("/webhooks/whatsapp", self._route("GET /webhooks/whatsapp"), methods=["GET"]),
                # Each platform's named routes (ChannelRoute), as the stack declares them too.
                *(
                    Route(
                        f"/webhooks/{name}/{{name}}",
                        self._route(f"POST /webhooks/{name}/{{name}}"),
                        methods=["POST"],
                    )
                    for name in PLATFORM_CHANNELS
                ),
                Route(
                    "/webhooks/whatsapp/{name}", self._route("GET /webhooks/whatsapp/{name}"), methods=["GET"]
                ),
            ]
        )

    async def _health(self, request: Request) -> Response:
        return JSONResponse(self.health())

    def _route(self, route_key: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            event = http_api_event(
                route_key=route_key,
                method=request.method,
                # The path as sent, not decoded: the client signs the request target byte for byte.
                raw_path=request.scope.get("raw_path", request.url.path.encode()).decode("latin-1"),
                raw_query=request.scope.get("query_string", b"").decode("latin-1"),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]],
                body=body,
                path_parameters=request.path_params,
                source_ip=request.client.host if request.client else "127.0.0.1",
            )
            try:
                result = await run_in_threadpool(self.webhook.invoke, event)
            except InvocationError as exc:
                # What API Gateway answers when the integration fails or times out.
                log.error("webhook function failed", extra={"route": route_key, "error": exc.error_type})
                if exc.error_type == "Sandbox.Timedout":
                    return JSONResponse({"message": "Service Unavailable"}, status_code=503)
                return JSONResponse({"message": "Internal Server Error"}, status_code=500)
            return proxy_response(result)

        return endpoint
