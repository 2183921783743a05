"""Telegram Bot API: sendMessage and editMessageText, HTML parse mode.

POST {base}/bot{token}/{method} with a JSON body; every answer is {"ok": bool, ...}, with
`result` on success and `description` (plus `parameters.retry_after` on a 429) on failure.
The token is in the path, so it is passed to the HTTP layer as a secret to mask.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from shared.channels.format import LIMITS, Dialect
from shared.channels.out.base import Slot, Target, route_secret
from shared.channels.out.http import ApiClient, ChannelError, ChannelNotConfigured, json_body
from shared.ports import SecretStore

if TYPE_CHECKING:
    import httpx

TOKEN_SECRET: Final = "telegram/bot-token"  # noqa: S105 -- the secret\'s name, not its value
_NUMERIC = re.compile(r"-?\d+")


def retry_after(response: httpx.Response) -> float | None:
    parameters = json_body(response).get("parameters")
    value = parameters.get("retry_after") if isinstance(parameters, dict) else None
    return float(value) if isinstance(value, int | float) else None


def html_to_text(text: str) -> str:
    """Telegram HTML back to plain text: the fallback when Telegram cannot parse our HTML."""
    return html.unescape(re.sub(r"<[^>]*>", "", text))


class TelegramApi:
    platform: Final = "telegram"
    dialect: Final[Dialect] = "telegram"
    limit: Final = LIMITS["telegram"]
    editable: Final = True

    def __init__(self, client: ApiClient, secrets: SecretStore) -> None:
        self._client = client
        self._secrets = secrets

    def rate_windows(self, target: Target) -> Sequence[tuple[int, float]]:
        # About one message a second per chat; groups (negative chat ids) also 20 a minute.
        if target.chat_id.startswith("-"):
            return [(1, 1.0), (20, 60.0)]
        return [(1, 1.0)]

    def post(self, target: Target, text: str, slot: Slot) -> str:
        payload: dict[str, Any] = {"chat_id": _chat_id(target.chat_id), "text": text}
        if target.thread_id and _NUMERIC.fullmatch(target.thread_id):
            payload["message_thread_id"] = int(target.thread_id)  # a forum topic
        reply_to = target.context.get("message_id")
        if slot.first and reply_to and _NUMERIC.fullmatch(reply_to):
            # Quote the user's message, unless it was deleted meanwhile.
            payload["reply_parameters"] = {"message_id": int(reply_to), "allow_sending_without_reply": True}
        result = self._call("sendMessage", payload, route_secret(target, TOKEN_SECRET))
        return str(result["message_id"])

    def edit(self, target: Target, message_id: str, text: str) -> None:
        payload = {"chat_id": _chat_id(target.chat_id), "message_id": int(message_id), "text": text}
        self._call("editMessageText", payload, route_secret(target, TOKEN_SECRET))

    def _call(self, method: str, payload: dict[str, Any], secret: str) -> dict[str, Any]:
        token = self._secrets.get(secret)
        if not token:
            raise ChannelNotConfigured(f"secret {secret} is not set", platform=self.platform)
        body = payload | {"parse_mode": "HTML", "link_preview_options": {"is_disabled": True}}
        response = self._client.request(
            "POST", f"/bot{token}/{method}", op=method, json=body, secrets=[token]
        )
        answer = json_body(response)
        description = str(answer.get("description", ""))
        if response.status_code == 400 and "can't parse entities" in description:
            # A rendering bug must not lose the reply: send it again as plain text.
            plain = payload | {"text": html_to_text(str(payload["text"]))}
            response = self._client.request(
                "POST", f"/bot{token}/{method}", op=method, json=plain, secrets=[token]
            )
            answer = json_body(response)
            description = str(answer.get("description", ""))
        if response.status_code == 400 and "message is not modified" in description:
            return {}  # an edit to the text it already shows: nothing to do
        if response.status_code != 200 or answer.get("ok") is not True:
            raise self._client.error(method, response, description or "no description", secrets=[token])
        result = answer.get("result")
        if not isinstance(result, dict):
            raise ChannelError(f"telegram {method}: answer without a message", platform=self.platform)
        return result


def _chat_id(chat_id: str) -> int | str:
    # Telegram takes an integer id or an @username; ids are sent as integers.
    return int(chat_id) if _NUMERIC.fullmatch(chat_id) else chat_id
