"""WhatsApp Cloud API: POST /{phone-number-id}/messages with a text body.

Authorised by a system-user access token (Bearer). The business phone number that sends is
the one the user wrote to: its id comes from the inbound reply_context (`phone_number_id`), or
from the secret whatsapp/phone-number-id for a single-number setup. WhatsApp messages cannot
be edited, so a reply is posted once, whole, when it is finished.

Throttling comes back as a Graph API error (HTTP 429, or 400 with codes 4, 80007, 130429,
131056) without a wait time; the retry policy's default wait applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from shared.channels.format import LIMITS, Dialect
from shared.channels.out.base import Slot, Target, route_secret
from shared.channels.out.http import ApiClient, ChannelError, ChannelNotConfigured, json_body
from shared.ports import SecretStore

if TYPE_CHECKING:
    import httpx

TOKEN_SECRET: Final = "whatsapp/access-token"  # noqa: S105 -- the secret\'s name, not its value
PHONE_NUMBER_SECRET: Final = "whatsapp/phone-number-id"  # noqa: S105 -- the secret\'s name, not its value
_THROTTLING_CODES: Final = frozenset({4, 80007, 130429, 131056})


def _error(response: httpx.Response) -> dict[str, Any]:
    error = json_body(response).get("error")
    return error if isinstance(error, dict) else {}


def rate_limited(response: httpx.Response) -> bool:
    return response.status_code == 429 or _error(response).get("code") in _THROTTLING_CODES


def retry_after(response: httpx.Response) -> float | None:
    return None  # Graph API throttling errors name no wait


class WhatsAppApi:
    platform: Final = "whatsapp"
    dialect: Final[Dialect] = "whatsapp"
    limit: Final = LIMITS["whatsapp"]
    editable: Final = False

    def __init__(self, client: ApiClient, secrets: SecretStore) -> None:
        self._client = client
        self._secrets = secrets

    def rate_windows(self, target: Target) -> Sequence[tuple[int, float]]:
        return [(1, 1.0)]  # pieces of one reply a second apart, well inside the pair rate limit

    def post(self, target: Target, text: str, slot: Slot) -> str:
        token_secret = route_secret(target, TOKEN_SECRET)
        token = self._secrets.get(token_secret)
        if not token:
            raise ChannelNotConfigured(f"secret {token_secret} is not set", platform=self.platform)
        phone_secret = route_secret(target, PHONE_NUMBER_SECRET)
        phone = target.context.get("phone_number_id") or self._secrets.get(phone_secret)
        if not phone:
            raise ChannelNotConfigured(
                f"no phone_number_id in the reply context and no secret {phone_secret}",
                platform=self.platform,
            )
        payload: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": target.chat_id,
            "type": "text",
            "text": {"body": text, "preview_url": False},
        }
        reply_to = target.context.get("message_id")
        if slot.first and reply_to:
            payload["context"] = {"message_id": reply_to}
        response = self._client.request(
            "POST",
            f"/{phone}/messages",
            op="messages",
            json=payload,
            headers={"Authorization": f"Bearer {token}"},
            secrets=[token],
        )
        if response.status_code != 200:
            error = _error(response)
            detail = f"{error.get('message', '')} (code {error.get('code', '?')})"
            raise self._client.error("messages", response, detail, secrets=[token])
        messages = json_body(response).get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
            raise ChannelError("whatsapp messages: answer without a message id", platform=self.platform)
        return str(messages[0]["id"])

    def edit(self, target: Target, message_id: str, text: str) -> None:
        raise ChannelError(
            "whatsapp messages cannot be edited", platform=self.platform, code="channel_rejected"
        )
