"""Discord interaction replies: edit the deferred original, then follow-up webhook messages.

An interaction is acknowledged within 3 seconds by the webhook handler with a deferred
response (type 5, "thinking..."); the reply then goes through the interaction's webhook,
authorised by the interaction token (valid 15 minutes) rather than the bot token:

- the turn's first message replaces the placeholder: PATCH /webhooks/{app}/{token}/messages/@original
- further messages are follow-ups: POST /webhooks/{app}/{token}?wait=true (wait returns the message)
- an edit of a follow-up: PATCH /webhooks/{app}/{token}/messages/{id}

The application id and the interaction token come from the inbound message's reply_context
(`application_id`, `interaction_token`). Every body disables mention parsing, so no text from
the model can ping @everyone or a role. A 429 carries `retry_after` (seconds, float) in its
JSON body and a Retry-After header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from shared.channels.format import LIMITS, Dialect
from shared.channels.out.base import Slot, Target
from shared.channels.out.http import ApiClient, ChannelNotConfigured, json_body, retry_after_header

if TYPE_CHECKING:
    import httpx

ORIGINAL: Final = "@original"
_NO_MENTIONS: Final[dict[str, list[str]]] = {"parse": []}


def retry_after(response: httpx.Response) -> float | None:
    value = json_body(response).get("retry_after")
    if isinstance(value, int | float):
        return float(value)
    return retry_after_header(response)


class DiscordApi:
    platform: Final = "discord"
    dialect: Final[Dialect] = "discord"
    limit: Final = LIMITS["discord"]
    editable: Final = True

    def __init__(self, client: ApiClient) -> None:
        self._client = client

    def rate_windows(self, target: Target) -> Sequence[tuple[int, float]]:
        return [(5, 5.0)]  # webhooks: five requests per five seconds

    def post(self, target: Target, text: str, slot: Slot) -> str:
        if slot.first:
            self.edit(target, ORIGINAL, text)
            return ORIGINAL
        app, token = self._webhook(target)
        body = self._call(
            "POST", f"/webhooks/{app}/{token}", "followup", {"content": text}, token, params={"wait": "true"}
        )
        return str(body["id"])

    def edit(self, target: Target, message_id: str, text: str) -> None:
        app, token = self._webhook(target)
        self._call(
            "PATCH", f"/webhooks/{app}/{token}/messages/{message_id}", "edit", {"content": text}, token
        )

    def _webhook(self, target: Target) -> tuple[str, str]:
        app = target.context.get("application_id")
        token = target.context.get("interaction_token")
        if not app or not token:
            raise ChannelNotConfigured(
                "a discord reply needs application_id and interaction_token in the reply context",
                platform=self.platform,
            )
        return app, token

    def _call(
        self,
        method: str,
        path: str,
        op: str,
        payload: dict[str, Any],
        token: str,
        *,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        body = payload | {"allowed_mentions": _NO_MENTIONS}
        response = self._client.request(method, path, op=op, json=body, params=params, secrets=[token])
        answer = json_body(response)
        if response.status_code not in (200, 204):
            detail = f"{answer.get('message', '')} ({answer.get('code', '?')})"
            if answer.get("code") == 10015:
                detail += ": the interaction token expired (15 minutes) or is unknown"
            raise self._client.error(op, response, detail, secrets=[token])
        return answer
