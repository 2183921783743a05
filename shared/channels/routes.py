"""Named channel routes at the webhook: which bot a request came to, and where its messages go.

A ChannelRoute (shared.models) is one bot: a Telegram bot, a Slack app, a Discord application, a
WhatsApp phone number. Its webhook is /webhooks/{platform}/{name}; the channel verifies it with
the route's secrets (shared.channels.inbound.secret_for), then, here:

- `check_account`: when the route names its account, a payload naming another one is refused
  (Forbidden, 403), so a signing secret shared by mistake between two apps can't cross-deliver.
  Telegram's updates name no bot, so only its secret token tells its bots apart.
- `routed`: each accepted message goes to its chat's workspace (the route's, or a per-chat
  override's), carries its chat's model when the route names one, and the route's name in its
  reply_context ("route"), which the platform senders read to answer with the route's token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final
from urllib.parse import parse_qs

from shared.channels.inbound import Accepted, IngressOutcome, WebhookRequest
from shared.errors import Forbidden
from shared.models import ChannelRoute, InboundMessage

# (platform, name) → the route, or None when there is none by that name.
RouteLookup = Callable[[str, str], ChannelRoute | None]
# The reply_context key naming the route a message came through.
ROUTE_KEY: Final = "route"


def no_routes(platform: str, name: str) -> ChannelRoute | None:
    """The lookup of a deployment that serves no named route: every /webhooks/{p}/{name} is a 404."""
    return None


def check_account(route: ChannelRoute, request: WebhookRequest) -> None:
    """Forbidden when `route.account` is set and the verified payload names another account.

    A payload that names no account (Slack's url_verification, a body `parse` will refuse as
    malformed) passes: the signature already tied it to this route's secret.
    """
    if route.account is None:
        return
    named = _accounts(route.platform, request.body)
    if named and route.account not in named:
        raise Forbidden(f"this payload is for another {route.platform} account than route {route.name!r}")


def routed(route: ChannelRoute, outcome: IngressOutcome) -> IngressOutcome:
    """The outcome with each accepted message sent where `route` (and its chat's override) says."""
    if not isinstance(outcome, Accepted):
        return outcome
    return replace(outcome, messages=[_route_message(route, m) for m in outcome.messages])


def _route_message(route: ChannelRoute, inbound: InboundMessage) -> InboundMessage:
    override = route.chats.get(inbound.chat_id)
    update: dict[str, Any] = {
        "workspace_id": route.workspace,
        "reply_context": {**inbound.reply_context, ROUTE_KEY: route.name},
    }
    if override is not None:
        if override.workspace is not None:
            update["workspace_id"] = override.workspace
        if override.model is not None:
            update["model"] = override.model
    return inbound.model_copy(update=update)


def _accounts(platform: str, body: bytes) -> set[str]:
    """The account ids the payload names (Slack: team and app; Discord: the application;
    WhatsApp: every phone number id). Read leniently: `parse` validates the payload itself."""
    if platform == "telegram":
        return set()  # an update names no bot
    data = _json(body) if body.lstrip()[:1] == b"{" else _form(body) if platform == "slack" else None
    if not isinstance(data, dict):
        return set()
    if platform == "slack":
        return {v for k in ("team_id", "api_app_id") if isinstance(v := data.get(k), str) and v}
    if platform == "discord":
        app = data.get("application_id")
        return {app} if isinstance(app, str) and app else set()
    found: set[str] = set()
    for entry in _dicts(data.get("entry")):
        for change in _dicts(entry.get("changes")):
            value = change.get("value")
            metadata = value.get("metadata") if isinstance(value, dict) else None
            phone = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
            if isinstance(phone, str) and phone:
                found.add(phone)
    return found


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _form(body: bytes) -> dict[str, str]:
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=100)
    except ValueError:
        return {}
    return {k: v[0] for k, v in fields.items()}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
