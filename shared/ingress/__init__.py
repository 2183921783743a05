"""The webhook's logic, independent of how HTTP arrives (Lambda event or the local gateway).

Verify → parse → queue on the session's lane → answer. Nothing else happens on the request path:
the turn runs later in the lane, so the platform gets its answer in milliseconds (Slack and
Discord give up after 3 seconds). The local gateway and the Lambda webhook both reach
`accept_web` / `read_outbox` (the web channel) and `accept` (the platform channels of
shared.channels.inbound) through one request adapter, shared.ingress.http, which also maps
SigilError to a status code, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from shared.channels import web
from shared.channels.inbound import Accepted, InboundChannel, IngressOutcome, WebhookRequest
from shared.errors import BadRequest
from shared.models import Identifier, LaneItem, OutboxEntry
from shared.ports import Lanes, Outbox, SecretStore, SubmitResult
from shared.serde import to_jsonable

# WebhookRequest lives with the channels (they read it); importers of this module still find it here.
__all__ = ["Ingress", "WebhookRequest", "outbox_json", "parse_after"]


@dataclass
class Ingress:
    lanes: Lanes
    outbox: Outbox
    secrets: SecretStore
    signature_window_s: int = 300
    max_body_bytes: int = 256 * 1024
    clock: Callable[[], float] = time.time

    def accept_web(self, workspace_id: str, request: WebhookRequest) -> tuple[SubmitResult, LaneItem]:
        """POST /webhooks/web/{workspace}: a signed message becomes one item on its session's lane."""
        _check_id(workspace_id, "workspace")
        if len(request.body) > self.max_body_bytes:
            raise BadRequest(f"body larger than {self.max_body_bytes} bytes")
        web.verify(
            self.secrets.get(web.secret_name(workspace_id)),
            request.headers,
            request.body,
            now=self.clock(),
            window_s=self.signature_window_s,
        )
        inbound = web.parse(workspace_id, request.body)
        item = LaneItem(inbound=inbound)
        return self.lanes.submit(item), item

    def accept(self, channel: InboundChannel, request: WebhookRequest) -> IngressOutcome:
        """POST (and WhatsApp's GET) /webhooks/{platform}: answer a handshake, or verify and queue.

        Every message of an Accepted outcome is on its lane before this returns; its dedup id is
        the platform's event id, so a retried delivery is acknowledged again and queued once.
        """
        if len(request.body) > self.max_body_bytes:
            raise BadRequest(f"body larger than {self.max_body_bytes} bytes")
        handshake = channel.handshake(request, self.secrets)
        if handshake is not None:
            return handshake
        channel.verify(request, self.secrets, now=self.clock(), window_s=self.signature_window_s)
        outcome = channel.parse(request)
        if isinstance(outcome, Accepted):
            for inbound in outcome.messages:
                self.lanes.submit(LaneItem(inbound=inbound))
        return outcome

    def authorise_read(self, workspace_id: str, request: WebhookRequest) -> None:
        """GETs on the outbox carry the same signature, over the request target instead of a body."""
        _check_id(workspace_id, "workspace")
        web.verify(
            self.secrets.get(web.secret_name(workspace_id)),
            request.headers,
            request.target.encode(),
            now=self.clock(),
            window_s=self.signature_window_s,
        )

    def read_outbox(self, workspace_id: str, session: str, request: WebhookRequest) -> list[OutboxEntry]:
        self.authorise_read(workspace_id, request)
        _check_id(session, "session")
        after = parse_after(request.query.get("after"))
        return self.outbox.read(workspace_id, web.session_id_for(session), after_seq=after)


def parse_after(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("'after' must be an integer") from None
    if value < 0:
        raise BadRequest("'after' must not be negative")
    return value


def outbox_json(entries: list[OutboxEntry]) -> dict[str, object]:
    return {
        "replies": [{"seq": e.seq, **to_jsonable(e.message)} for e in entries],
        "next_after": entries[-1].seq if entries else None,
    }


_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def _check_id(value: str, what: str) -> None:
    try:
        _IDENTIFIER.validate_python(value)
    except ValidationError:
        raise BadRequest(f"invalid {what} id") from None
