"""The webhook's logic, independent of how HTTP arrives (Lambda event or the local gateway).

Verify → parse → queue on the session's lane → answer. Nothing else happens on the request path:
the turn runs later in the lane, so the platform gets its answer in milliseconds (Slack and
Discord give up after 3 seconds). The local gateway and the Lambda webhook both reach
`accept_web` / `read_outbox` (the web channel) and `accept` (the platform channels of
shared.channels.inbound) through one request adapter, shared.ingress.http, which also maps
SigilError to a status code, once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pydantic import TypeAdapter, ValidationError

from shared import correlation
from shared.channels import channel_for, web
from shared.channels.inbound import (
    MAX_INT63,
    Accepted,
    InboundChannel,
    IngressOutcome,
    WebhookRequest,
    bounded_int,
)
from shared.channels.routes import RouteLookup, check_account, no_routes, routed
from shared.errors import BadRequest, NotFound
from shared.models import PLATFORMS, ROUTE_NAME_PATTERN, Identifier, InboundMessage, LaneItem, OutboxEntry
from shared.ports import Lanes, Outbox, SecretStore, SubmitResult
from shared.serde import to_jsonable

# WebhookRequest lives with the channels (they read it); importers of this module still find it here.
__all__ = ["Ingress", "WebhookRequest", "outbox_json", "parse_after"]

log = logging.getLogger("sigil.ingress")

MAX_REMEMBERED_MISSES: Final = 4096


@dataclass
class Ingress:
    lanes: Lanes
    outbox: Outbox
    secrets: SecretStore
    signature_window_s: int = 300
    max_body_bytes: int = 256 * 1024
    clock: Callable[[], float] = time.time
    # How long a workspace whose web secret could not be read answers 401 without reading again.
    # 0 (the local gateway's file store is cheap to read, and a secret created there works at once).
    secret_miss_ttl_s: float = 0.0
    # The named routes (/webhooks/{platform}/{name}); the cloud's is cached (shared.ingress.routes).
    routes: RouteLookup = no_routes
    _misses: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def accept_web(self, workspace_id: str, request: WebhookRequest) -> tuple[SubmitResult, LaneItem]:
        """POST /webhooks/web/{workspace}: a signed message becomes one item on its session's lane."""
        check_id(workspace_id, "workspace")
        if len(request.body) > self.max_body_bytes:
            raise BadRequest(f"body larger than {self.max_body_bytes} bytes")
        self._verify_web(workspace_id, request, request.body)
        inbound = web.parse(workspace_id, request.body)
        if inbound.attachments:
            # Checking a media id is this sender's takes the media store, which only the browser's
            # fronts hold (shared.channels.web_media): files come over the browser protocol.
            raise BadRequest("attachments are sent over the browser protocol (a `send` frame)")
        return self.accept_verified(inbound)

    def accept_verified(self, inbound: InboundMessage) -> tuple[SubmitResult, LaneItem]:
        """A message whose sender is already authenticated (a browser token's user on the
        WebSocket API: shared.ingress.ws) onto its session's lane, as `accept_web` queues one."""
        item = LaneItem(inbound=inbound, correlation_id=correlation.current())
        return self.lanes.submit(item), item

    def channel(self, platform: str, route_name: str | None, workspace_id: str) -> InboundChannel:
        """The channel behind /webhooks/{platform} (delivering into `workspace_id`), or behind
        /webhooks/{platform}/{route_name}: NotFound for a route nobody declared, before any
        secret is read."""
        if route_name is None:
            return channel_for(platform, workspace_id)
        if platform not in PLATFORMS:
            raise NotFound("no such channel")
        # A name that can't be a route's is not looked up: a probe costs no store read.
        route = self.routes(platform, route_name) if _ROUTE_NAME.fullmatch(route_name) else None
        if route is None or route.platform != platform:
            raise NotFound(f"no {platform} route by that name", code="route_not_found")
        return channel_for(platform, route.workspace, route)

    def accept(self, channel: InboundChannel, request: WebhookRequest) -> IngressOutcome:
        """POST (and WhatsApp's GET) /webhooks/{platform}[/{name}]: answer a handshake, or verify
        and queue.

        Every message of an Accepted outcome is on its lane before this returns; its dedup id is
        the platform's event id, so a retried delivery is acknowledged again and queued once. A
        named route's messages are checked against its account and sent to its workspaces
        (shared.channels.routes).
        """
        if len(request.body) > self.max_body_bytes:
            raise BadRequest(f"body larger than {self.max_body_bytes} bytes")
        handshake = channel.handshake(request, self.secrets)
        if handshake is not None:
            return handshake
        channel.verify(request, self.secrets, now=self.clock(), window_s=self.signature_window_s)
        route = channel.route
        if route is not None:
            check_account(route, request)
        outcome = channel.parse(request)
        if route is not None:
            outcome = routed(route, outcome)
        if isinstance(outcome, Accepted):
            for inbound in outcome.messages:
                self.lanes.submit(LaneItem(inbound=inbound, correlation_id=correlation.current()))
        return outcome

    def authorise_read(self, workspace_id: str, request: WebhookRequest) -> None:
        """GETs on the outbox carry the same signature, over the request target instead of a body."""
        check_id(workspace_id, "workspace")
        self._verify_web(workspace_id, request, request.target.encode())

    def _verify_web(self, workspace_id: str, request: WebhookRequest, payload: bytes) -> None:
        # The headers first: an unsigned, stale or malformed request is refused before any secret
        # read, so it costs no Secrets Manager call and its answer can't tell workspaces apart.
        ts, sig = web.signed_parts(request.headers, now=self.clock(), window_s=self.signature_window_s)
        web.check_signature(self._web_secret(workspace_id), ts, sig, payload)

    def _web_secret(self, workspace_id: str) -> str | None:
        """The workspace's signing secret; None, answered like a wrong signature, when unreadable.

        Any failure counts, not only "not found": a workspace outside the function's secret
        policy (AccessDenied), a throttle or an outage must answer as an unknown workspace does,
        never with a 500 that tells a probe the workspace exists. A miss is remembered for
        `secret_miss_ttl_s`, so a probe repeating a request costs one read per interval (the
        store caches the secrets it finds).
        """
        name = web.secret_name(workspace_id)
        now = time.monotonic()
        if self._misses.get(name, 0.0) > now:
            return None
        try:
            secret = self.secrets.get(name)
        # Broad on purpose: each store raises its own SDK's errors (powertools' GetParameterError
        # around botocore's, OSError from the local file), and every one means "can't verify".
        except Exception as exc:  # noqa: BLE001 -- fails closed: a 401, logged for the operator
            log.warning(
                "web signing secret unreadable",
                extra={"workspace_id": workspace_id, "error": type(exc).__name__, "reason": str(exc)},
            )
            secret = None
        else:
            if secret is None:
                log.info("no web signing secret", extra={"workspace_id": workspace_id})
        if secret is None and self.secret_miss_ttl_s > 0:
            if len(self._misses) >= MAX_REMEMBERED_MISSES:
                # Bounded: a probe over many workspace ids can't grow the container's memory.
                self._misses = {k: t for k, t in self._misses.items() if t > now}
                if len(self._misses) >= MAX_REMEMBERED_MISSES:
                    self._misses.clear()
            self._misses[name] = now + self.secret_miss_ttl_s
        return secret

    def read_outbox(self, workspace_id: str, session: str, request: WebhookRequest) -> list[OutboxEntry]:
        self.authorise_read(workspace_id, request)
        check_id(session, "session")
        after = parse_after(request.query.get("after"))
        return self.outbox.read(workspace_id, web.session_id_for(session), after_seq=after)


def parse_after(raw: str | None) -> int:
    """The outbox position to read after (`?after=` or SSE's Last-Event-ID); BadRequest if unusable.

    Bounded to a 63-bit non-negative integer, the widest an outbox stores, so a 20-digit value is
    a 400 here rather than an OverflowError binding it to SQLite.
    """
    if raw is None or raw == "":
        return 0
    return bounded_int(raw, what="'after'", hi=MAX_INT63)


def outbox_json(entries: list[OutboxEntry]) -> dict[str, object]:
    return {
        "replies": [{"seq": e.seq, **to_jsonable(e.message)} for e in entries],
        "next_after": entries[-1].seq if entries else None,
    }


_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
_ROUTE_NAME = re.compile(ROUTE_NAME_PATTERN)


def check_id(value: str, what: str) -> None:
    try:
        _IDENTIFIER.validate_python(value)
    except ValidationError:
        raise BadRequest(f"invalid {what} id") from None
