"""Slack Web API: chat.postMessage and chat.update, mrkdwn, replies in the thread.

POST {base}/{method} with a bot token in the Authorization header and a JSON body. Slack
answers HTTP 200 with {"ok": false, "error": "..."} for most failures, and HTTP 429 with a
Retry-After header (seconds) when rate limited.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from shared.channels.format import LIMITS, Dialect
from shared.channels.out.base import Slot, Target, route_secret
from shared.channels.out.http import ApiClient, ChannelError, ChannelNotConfigured, json_body
from shared.ports import SecretStore

TOKEN_SECRET: Final = "slack/bot-token"  # noqa: S105 -- the secret\'s name, not its value
# Slack's own transient failures: the same call may succeed later.
_TRANSIENT: Final = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})


class SlackApi:
    platform: Final = "slack"
    dialect: Final[Dialect] = "slack"
    limit: Final = LIMITS["slack"]
    editable: Final = True

    def __init__(self, client: ApiClient, secrets: SecretStore) -> None:
        self._client = client
        self._secrets = secrets

    def rate_windows(self, target: Target) -> Sequence[tuple[int, float]]:
        return [(1, 1.0)]  # chat.postMessage: about one message a second per channel

    def post(self, target: Target, text: str, slot: Slot) -> str:
        payload: dict[str, Any] = {
            "channel": target.chat_id,
            "text": text,
            "mrkdwn": True,
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if target.thread_id:
            payload["thread_ts"] = target.thread_id
        answer = self._call("chat.postMessage", payload, route_secret(target, TOKEN_SECRET))
        return str(answer["ts"])

    def edit(self, target: Target, message_id: str, text: str) -> None:
        payload = {"channel": target.chat_id, "ts": message_id, "text": text}
        self._call("chat.update", payload, route_secret(target, TOKEN_SECRET))

    def _call(self, method: str, payload: dict[str, Any], secret: str) -> dict[str, Any]:
        token = self._secrets.get(secret)
        if not token:
            raise ChannelNotConfigured(f"secret {secret} is not set", platform=self.platform)
        headers = {
            "Authorization": f"Bearer {token}",
            # Without the charset Slack answers with a missing_charset warning.
            "Content-Type": "application/json; charset=utf-8",
        }
        response = self._client.request(
            "POST", f"/{method}", op=method, json=payload, headers=headers, secrets=[token]
        )
        answer = json_body(response)
        if response.status_code != 200:
            raise self._client.error(method, response, str(answer.get("error", "")), secrets=[token])
        if answer.get("ok") is not True:
            error = str(answer.get("error", "unknown_error"))
            raise ChannelError(
                f"slack {method} failed: {error}",
                platform=self.platform,
                code="channel_unavailable" if error in _TRANSIENT else "channel_rejected",
                status=response.status_code,
                retryable=error in _TRANSIENT,
            )
        return answer
