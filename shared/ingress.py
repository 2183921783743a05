"""The webhook's logic, independent of how HTTP arrives (Lambda event or the local gateway).

Verify → parse → queue on the session's lane → answer. Nothing else happens on the request path:
the turn runs later in the lane, so the platform gets its answer in milliseconds. The local
gateway and the Lambda webhook both call `accept_web` / `read_outbox`, and map SigilError to a
status code once, in their own adapter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from shared.channels import web
from shared.errors import BadRequest
from shared.models import Identifier, LaneItem, OutboxEntry
from shared.ports import Lanes, Outbox, SecretStore, SubmitResult
from shared.serde import to_jsonable


@dataclass(frozen=True)
class WebhookRequest:
    """The parts of an HTTP request the webhook needs; header names lower-case."""

    method: str
    target: str  # path with query string, exactly as signed by GET clients
    headers: dict[str, str]
    body: bytes
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


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
