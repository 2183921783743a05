"""The webhook: HTTP API (payload v2) requests to shared.ingress, SigilError to a status code, once.

Nothing here logs a request body or the signature headers: the body is the user's message, and
logs outlive the memory retention rules.
"""

from __future__ import annotations

import base64
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared import cloud
from shared.channels import channel_for
from shared.channels.inbound import Accepted, ChannelName, Handshake, IngressOutcome
from shared.errors import SigilError
from shared.ingress import WebhookRequest, outbox_json
from shared.observability import logger, metrics, tracer

app = APIGatewayHttpResolver()


@app.post("/webhooks/web/<workspace>", status_code=202)
def post_web(workspace: str) -> dict[str, Any]:
    result, item = cloud.ingress().accept_web(workspace, _request())
    metrics.add_metric(
        name="MessagesQueued" if result.status == "queued" else "MessagesDuplicate",
        unit=MetricUnit.Count,
        value=1,
    )
    inbound = item.inbound
    logger.info(
        "message accepted",
        extra={
            "workspace_id": inbound.workspace_id,
            "session_id": inbound.session_id,
            "event_id": inbound.event_id,
            "status": result.status,
        },
    )
    return {"status": result.status, "event_id": inbound.event_id, "session": inbound.chat_id}


@app.post("/webhooks/telegram")
def post_telegram() -> Response[str]:
    return _platform("telegram")


@app.post("/webhooks/slack")
def post_slack() -> Response[str]:
    return _platform("slack")


@app.post("/webhooks/discord")
def post_discord() -> Response[str]:
    return _platform("discord")


@app.post("/webhooks/whatsapp")
def post_whatsapp() -> Response[str]:
    return _platform("whatsapp")


@app.get("/webhooks/whatsapp")
def get_whatsapp() -> Response[str]:
    # Meta's subscription handshake (hub.challenge), answered by the same channel.
    return _platform("whatsapp")


def _platform(name: ChannelName) -> Response[str]:
    """A platform's delivery: handshake, or verify and queue; 200 with the body it expects."""
    channel = channel_for(name, cloud.settings().resolved_channel_workspace())
    outcome = cloud.ingress().accept(channel, _request())
    _record(name, outcome)
    return Response(status_code=outcome.status, content_type=outcome.content_type, body=outcome.body)


def _record(name: ChannelName, outcome: IngressOutcome) -> None:
    if isinstance(outcome, Accepted):
        metrics.add_metric(name="MessagesQueued", unit=MetricUnit.Count, value=len(outcome.messages))
        for inbound in outcome.messages:
            logger.info(
                "message accepted",
                extra={
                    "channel": name,
                    "workspace_id": inbound.workspace_id,
                    "session_id": inbound.session_id,
                    "event_id": inbound.event_id,
                },
            )
    elif isinstance(outcome, Handshake):
        metrics.add_metric(name="Handshakes", unit=MetricUnit.Count, value=1)
        logger.info("handshake answered", extra={"channel": name, "status": outcome.status})
    else:
        metrics.add_metric(name="EventsIgnored", unit=MetricUnit.Count, value=1)
        logger.info("event ignored", extra={"channel": name, "reason": outcome.reason})


@app.get("/sessions/<workspace>/<session>/outbox")
def get_outbox(workspace: str, session: str) -> dict[str, Any]:
    return outbox_json(cloud.ingress().read_outbox(workspace, session, _request()))


# powertools leaves exception_handler's return type unannotated, which strict mypy reports.
@app.exception_handler(SigilError)  # type: ignore[untyped-decorator]
def refuse(exc: SigilError) -> Response[dict[str, str]]:
    # The reason is ours (never the request body), so it is safe to return and to log.
    # A warning for our own faults (misconfiguration), info for the caller's.
    log = logger.warning if exc.http_status >= 500 else logger.info
    log(
        "request refused",
        extra={
            "route": app.current_event.route_key,
            "status": exc.http_status,
            "code": exc.code,
            "reason": exc.message,
        },
    )
    metrics.add_metric(name="RequestsRefused", unit=MetricUnit.Count, value=1)
    return Response(
        status_code=exc.http_status,
        content_type=content_types.APPLICATION_JSON,
        body={"error": exc.code, "message": exc.message},
    )


def _request() -> WebhookRequest:
    """The request as the client signed it, from the resolver's typed v2 event."""
    event = app.current_event
    raw = event.body or ""
    # API Gateway hands over non-text bodies base64-encoded; the signature is over the bytes sent.
    body = base64.b64decode(raw) if event.is_base64_encoded else raw.encode()
    # rawPath, not the resolver's `path`: a named stage stays in the target, as the client sent it.
    target = event.raw_path + (f"?{event.raw_query_string}" if event.raw_query_string else "")
    return WebhookRequest(
        method=event.http_method,
        target=target,
        headers={name.lower(): value for name, value in event.headers.items()},
        body=body,
        path_params=dict(event.path_parameters),
        query=dict(event.query_string_parameters or {}),
    )


# log_event=False even if POWERTOOLS_LOGGER_LOG_EVENT is set: the event carries the message text.
# capture_response=False: an outbox response carries the replies, which must not land in X-Ray.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
