"""Posting frames to the WebSocket API's connections through API Gateway's management API."""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import clients

log = logging.getLogger("sigil.websocket")


class ManagementApiPoster:
    """ports.ConnectionPoster over `POST @connections/{id}` (`execute-api:ManageConnections`).

    `endpoint` is the stage's management URL, https://{api-id}.execute-api.{region}.amazonaws.com/{stage}
    (SIGIL_WS_ENDPOINT). A GoneException (410) means the browser left without a $disconnect we
    have seen yet: False, and the caller forgets the connection. Other errors raise.
    """

    def __init__(self, endpoint: str, *, region: str | None = None, client: Any = None) -> None:
        self.endpoint = endpoint
        self._region = region
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = clients.apigatewaymanagementapi(self.endpoint, self._region)
        return self._client

    def post(self, connection_id: str, data: bytes) -> bool:
        try:
            self.client.post_to_connection(ConnectionId=connection_id, Data=data)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "GoneException":
                return False
            raise
        return True

    def hang_up(self, connection_id: str) -> None:
        try:
            self.client.delete_connection(ConnectionId=connection_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "GoneException":
                raise
