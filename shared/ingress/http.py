"""The one request adapter of the webhook's HTTP fronts: the Lambda (API Gateway HTTP API events)
and the local gateway (Starlette).

A front turns its request into a WebhookRequest, calls one method of `WebhookFront` per route
(POST /webhooks/web/{workspace}, POST /webhooks/{channel}[/{route}], WhatsApp's GET,
GET /sessions/{workspace}/{session}/outbox) and writes the `HttpAnswer` back in its own response
type; its SigilError handler answers `refusal(exc)`. The routes' calls, status codes and bodies
live here once, so the two fronts cannot drift. Each front serialises a JSON body itself, as
before (powertools escapes non-ASCII text, Starlette does not).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from shared.channels import web_page
from shared.channels.inbound import JSON, IngressOutcome, WebhookRequest
from shared.errors import SigilError
from shared.ingress import Ingress, outbox_json
from shared.models import LaneItem
from shared.ports import SubmitResult

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: str | dict[str, Any]  # a dict is sent as JSON, serialised by the front
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


class Observer(Protocol):
    """What a front records about each request it answered (the Lambda: metrics and log lines)."""

    def web_accepted(self, result: SubmitResult, item: LaneItem) -> None: ...

    def platform_answered(self, channel: str, outcome: IngressOutcome) -> None: ...


class Unobserved:
    """The local gateway's observer: its own log lines are enough on a developer's machine."""

    def web_accepted(self, result: SubmitResult, item: LaneItem) -> None:
        return None

    def platform_answered(self, channel: str, outcome: IngressOutcome) -> None:
        return None


@dataclass
class WebhookFront:
    ingress: Ingress
    channel_workspace: str  # the workspace the platform channels deliver into
    observer: Observer = field(default_factory=Unobserved)

    def post_web(self, workspace_id: str, request: WebhookRequest) -> HttpAnswer:
        """POST /webhooks/web/{workspace}: 202 once the message is on its lane (or a duplicate)."""
        result, item = self.ingress.accept_web(workspace_id, request)
        self.observer.web_accepted(result, item)
        inbound = item.inbound
        return HttpAnswer(
            202, {"status": result.status, "event_id": inbound.event_id, "session": inbound.chat_id}
        )

    def platform(self, name: str, request: WebhookRequest, route: str | None = None) -> HttpAnswer:
        """POST /webhooks/{channel} (and WhatsApp's GET handshake): the body the platform expects.

        With `route`, POST (and GET) /webhooks/{channel}/{route}: that named route's bot, a 404
        when there is none by that name."""
        channel = self.ingress.channel(name, route, self.channel_workspace)
        outcome = self.ingress.accept(channel, request)
        self.observer.platform_answered(name, outcome)
        return HttpAnswer(outcome.status, outcome.body, outcome.content_type)

    def outbox(self, workspace_id: str, session: str, request: WebhookRequest) -> HttpAnswer:
        """GET /sessions/{workspace}/{session}/outbox: the replies after `?after=`."""
        return HttpAnswer(200, outbox_json(self.ingress.read_outbox(workspace_id, session, request)))


def page(path: str, websocket_url: str | None, uploads_url: str | None = None) -> HttpAnswer:
    """GET /, /config.json and /assets/{file}: the chat page (shared.channels.web_page).

    Any other path, and any asset name not in the page's fixed list, is a 404: the request never
    names a file to read. `uploads_url`: where the page posts files (the media bucket), for its
    Content-Security-Policy; None: its own origin."""
    if path == "/":
        found: web_page.PageFile | None = web_page.index()
    elif path == "/config.json":
        found = web_page.config(websocket_url)
    elif path.startswith("/assets/"):
        found = web_page.asset(path.removeprefix("/assets/"))
    else:
        found = None
    if found is None:
        return HttpAnswer(404, {"error": "not_found", "message": "no such file"})
    headers = web_page.security_headers(websocket_url, uploads_url) | {"cache-control": found.cache_control}
    return HttpAnswer(200, found.body, found.content_type, headers)


def refusal(exc: SigilError) -> HttpAnswer:
    # The reason is ours (never the request body), so it is safe to return.
    return HttpAnswer(exc.http_status, {"error": exc.code, "message": exc.message})


def request_from_v2(event: APIGatewayProxyEventV2) -> WebhookRequest:
    """The request as the client signed it, from an HTTP API (payload v2) event."""
    raw = event.body or ""
    # API Gateway hands over non-text bodies base64-encoded; the signature is over the bytes sent.
    body = base64.b64decode(raw) if event.is_base64_encoded else raw.encode()
    # rawPath, not the resolver's `path`: a named stage stays in the target, as the client sent it.
    target = event.raw_path + (f"?{event.raw_query_string}" if event.raw_query_string else "")
    return WebhookRequest(
        method=event.http_method,
        target=target,
        headers={name.lower(): value for name, value in event.headers.items()},
        body=body,
        path_params=dict(event.path_parameters),
        query=dict(event.query_string_parameters or {}),
    )
