"""The webhook: HTTP API (payload v2) events to the request adapter shared.ingress.http, and back;
the local gateway answers through the same adapter. What each answer records: shared.ingress.metered.
"""

from __future__ import annotations

from typing import Any

from shared.coldstart import cold_imports

with cold_imports():  # without the collector's passes or pydantic's plugin search (shared.coldstart)
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from shared import cloud, correlation
    from shared.errors import SigilError
    from shared.ingress.http import HttpAnswer, page, refusal, request_from_v2
    from shared.ingress.metered import refused
    from shared.observability import logger, metrics, tracer

app = APIGatewayHttpResolver()


@app.post("/webhooks/web/<workspace>")
def post_web(workspace: str) -> Response[Any]:
    return _answer(cloud.webhook().post_web(workspace, request_from_v2(app.current_event)))


@app.post("/webhooks/<channel>")
def post_platform(channel: str) -> Response[Any]:
    return _answer(cloud.webhook().platform(channel, request_from_v2(app.current_event)))


@app.get("/webhooks/whatsapp")
def get_whatsapp() -> Response[Any]:
    # Meta's subscription handshake (hub.challenge), answered by the same channel.
    return _answer(cloud.webhook().platform("whatsapp", request_from_v2(app.current_event)))


# A named route's bot (ChannelRoute); registered after the web channel's route, which matches first.
@app.post("/webhooks/<channel>/<route>")
def post_platform_route(channel: str, route: str) -> Response[Any]:
    return _answer(cloud.webhook().platform(channel, request_from_v2(app.current_event), route))


@app.get("/webhooks/whatsapp/<route>")
def get_whatsapp_route(route: str) -> Response[Any]:
    return _answer(cloud.webhook().platform("whatsapp", request_from_v2(app.current_event), route))


@app.get("/sessions/<workspace>/<session>/outbox")
def get_outbox(workspace: str, session: str) -> Response[Any]:
    return _answer(cloud.webhook().outbox(workspace, session, request_from_v2(app.current_event)))


# The chat page's uploads (shared.media.upload): a presigned POST to the media bucket, then its
# confirmation; the browser token is the credential, as on the page's socket.
@app.post("/media/<workspace>/uploads")
def post_upload_slot(workspace: str) -> Response[Any]:
    return _answer(cloud.uploads().slot(workspace, request_from_v2(app.current_event)))


@app.post("/media/<workspace>/uploads/<media_id>")
def post_upload_confirm(workspace: str, media_id: str) -> Response[Any]:
    return _answer(cloud.uploads().confirm(workspace, media_id, request_from_v2(app.current_event)))


# The chat page, same origin as the webhooks: no CORS for its own requests, nothing else to run.
# It needs no secret and builds no ingress (shared.ingress.http.page reads the packaged files);
# the socket's URL is SIGIL_WS_URL, from the settings validated once per container, and where the
# page posts files is the media bucket's presigned POST URL (cloud.uploads_url).
@app.get("/")
def get_page() -> Response[Any]:
    return _answer(page("/", cloud.settings().ws_url, cloud.uploads_url()))


@app.get("/config.json")
def get_page_config() -> Response[Any]:
    return _answer(page("/config.json", cloud.settings().ws_url, cloud.uploads_url()))


@app.get("/assets/<name>")
def get_page_asset(name: str) -> Response[Any]:
    return _answer(page(f"/assets/{name}", cloud.settings().ws_url, cloud.uploads_url()))


# powertools leaves exception_handler's return type unannotated, which strict mypy reports.
@app.exception_handler(SigilError)  # type: ignore[untyped-decorator]
def refuse(exc: SigilError) -> Response[Any]:
    refused(app.current_event.route_key, exc)
    return _answer(refusal(exc))


def _answer(answer: HttpAnswer) -> Response[Any]:
    return Response(
        status_code=answer.status,
        content_type=answer.content_type,
        body=answer.body,
        headers=answer.headers or None,
    )


# log_event=False even if POWERTOOLS_LOGGER_LOG_EVENT is set: the event carries the message text.
# capture_response=False: an outbox response carries the replies, which must not land in X-Ray.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The request id the logger took from the event goes on each queued LaneItem (shared.ingress).
    with correlation.correlated(logger.get_correlation_id(), tracer=tracer):
        return app.resolve(event, context)
