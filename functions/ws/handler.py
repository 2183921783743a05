"""The WebSocket API's one function: $connect, $disconnect and $default events to shared.ingress.ws.

$connect answers 200 to admit the browser or 401 to refuse it (API Gateway then fails the
handshake); the other routes answer 200 and speak to the browser in frames posted through the
management API, so the turn's frames and these take the same path (docs/web-streaming-cloud.md).
"""

from __future__ import annotations

import base64
from typing import Any

from shared.coldstart import cold_imports

with cold_imports():  # without the collector's passes or pydantic's plugin search (shared.coldstart)
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from shared import cloud, correlation
    from shared.errors import SigilError
    from shared.observability import logger, metrics, tracer


def route(event: dict[str, Any]) -> dict[str, Any]:
    context = event["requestContext"]
    connection_id: str = context["connectionId"]
    route_key: str = context["routeKey"]
    if route_key == "$connect":
        token = (event.get("queryStringParameters") or {}).get("token")
        # API Gateway keeps the header's case as the browser sent it.
        origin = next((v for k, v in (event.get("headers") or {}).items() if k.lower() == "origin"), None)
        try:
            cloud.ws_front().connect(connection_id, token, origin=origin)
        except SigilError as exc:
            # The reason is logged, not returned: a refused handshake shows the browser no body.
            logger.info("web socket refused", extra={"code": exc.code, "reason": exc.message})
            return {"statusCode": exc.http_status}
    elif route_key == "$disconnect":
        cloud.ws_front().disconnect(connection_id)
    else:
        raw = event.get("body") or ""
        body = base64.b64decode(raw) if event.get("isBase64Encoded") else raw
        cloud.ws_front().message(connection_id, body)
    return {"statusCode": 200}


# log_event=False: a frame carries the user's message, and $connect's query string the token.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The request id goes on the LaneItem a `send` queues, as the webhook's does.
    with correlation.correlated(logger.get_correlation_id(), tracer=tracer):
        return route(event)
