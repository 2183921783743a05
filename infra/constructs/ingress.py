"""Ingress: the HTTP API every channel calls, in front of the webhook function.

Each route names its channel, so the webhook knows from the route key which signature scheme to
check. Authentication is the platforms' own (HMAC, Ed25519, secret tokens), checked in the
function against secrets from Secrets Manager: API Gateway cannot verify any of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import jsii
from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import Throttle
from infra.constructs.function import SigilFunction
from infra.constructs.nag import acknowledge

# (method, path). The web channel posts per workspace (shared/ingress/ `accept_web`) and reads
# its replies from the outbox; WhatsApp's GET is Meta's hub.challenge handshake.
ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/webhooks/web/{workspace}"),
    ("POST", "/webhooks/telegram"),
    ("POST", "/webhooks/slack"),
    ("POST", "/webhooks/discord"),
    ("POST", "/webhooks/whatsapp"),
    ("GET", "/webhooks/whatsapp"),
    # Named routes (shared.models.ChannelRoute): one bot each, several per platform.
    ("POST", "/webhooks/telegram/{name}"),
    ("POST", "/webhooks/slack/{name}"),
    ("POST", "/webhooks/discord/{name}"),
    ("POST", "/webhooks/whatsapp/{name}"),
    ("GET", "/webhooks/whatsapp/{name}"),
    ("GET", "/sessions/{workspace}/{session}/outbox"),
    # The chat page's uploads (shared.media.upload): a presigned POST to the media bucket, then
    # its confirmation, each with the page's browser token.
    ("POST", "/media/{workspace}/uploads"),
    ("POST", "/media/{workspace}/uploads/{media_id}"),
    # The chat page, served by the webhook function (shared.channels.web_page): the same origin
    # as the web routes, so its own requests need no CORS.
    ("GET", "/"),
    ("GET", "/config.json"),
    ("GET", "/assets/{name}"),
)
# The routes whose requests may each become a turn, and so a model call: throttled tighter.
# The uploads queue nothing: the stage's own throttle.
TURN_ROUTES = tuple((m, p) for m, p in ROUTES if m == "POST" and not p.startswith("/media/"))


def cors_for(origin: str) -> apigwv2.CorsPreflightOptions:
    return apigwv2.CorsPreflightOptions(
        allow_origins=[origin],
        allow_methods=[apigwv2.CorsHttpMethod.GET, apigwv2.CorsHttpMethod.POST],
        allow_headers=[
            "content-type",
            "x-sigil-timestamp",
            "x-sigil-signature",
            "last-event-id",
            "authorization",
        ],
        max_age=Duration.hours(1),
    )


def route_key(method: str, path: str) -> str:
    return f"{method} {path}"


# The $context variables of an HTTP API access log; the request id ties a line to the function's.
ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "integrationLatency": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class AccessLogs:
    """A stage's access log: JSON lines of `fields` (API Gateway $context variables) into a group.
    The HTTP API's and the WebSocket API's stages each give their own fields."""

    def __init__(self, log_group: logs.ILogGroup, fields: Mapping[str, str]) -> None:
        self._log_group = log_group
        self._fields = fields

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return apigwv2.LogGroupLogDestination(self._log_group)

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(json.dumps(dict(self._fields)))


class Ingress(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
        access_log_group: logs.ILogGroup,
        reserved_concurrency: int | None,
        api_throttle: Throttle,
        turn_throttle: Throttle,
        cors_origin: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = SigilFunction(
            self,
            "Webhook",
            source="webhook",
            description="Sigil webhook: verifies, normalises and queues inbound messages",
            # Verify, parse, one SendMessage: milliseconds. Platforms give up after 3 s (Slack,
            # Discord), and API Gateway after 30 s.
            timeout=Duration.seconds(10),
            memory_size=512,
            layer=layer,
            log_group=log_group,
            # Tens of milliseconds a warm request: 10 at once answer some hundreds a second, more
            # than the turn routes' throttles let through.
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        self.api = apigwv2.HttpApi(
            self,
            "Api",
            description="Sigil channel webhooks and the web channel's outbox",
            create_default_stage=False,
            # The chat page's origin alone (the `web_origin` context), never "*": API Gateway
            # answers the preflight itself, and a page elsewhere cannot read an answer.
            cors_preflight=None if cors_origin is None else cors_for(cors_origin),
        )
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.api,
            stage_name="$default",
            auto_deploy=True,
            access_log_settings=AccessLogs(access_log_group, ACCESS_LOG_FORMAT),
            # A ceiling for floods and runaway retries, per route (the stage's default route
            # settings apply to each route on its own, not to the API as a whole).
            throttle=apigwv2.ThrottleSettings(rate_limit=api_throttle.rate, burst_limit=api_throttle.burst),
        )
        integration = integrations.HttpLambdaIntegration("Webhook", self.function)
        for method, path in ROUTES:
            method_ = apigwv2.HttpMethod(method)
            routes = self.api.add_routes(path=path, methods=[method_], integration=integration)
            # The stage's route settings name routes by key; CloudFormation refuses a key that
            # does not exist yet.
            self.stage.node.add_dependency(*routes)
        # Tighter on the routes that queue turns: each accepted request may become a model call.
        cfn_stage = self.stage.node.default_child
        assert isinstance(cfn_stage, apigwv2.CfnStage)
        cfn_stage.route_settings = {
            route_key(method, path): {
                "ThrottlingRateLimit": turn_throttle.rate,
                "ThrottlingBurstLimit": turn_throttle.burst,
            }
            for method, path in TURN_ROUTES
        }
        acknowledge(
            self.api,
            "AwsSolutions-APIG4",
            "Callers are Telegram, Slack, Discord, Meta and web clients, which cannot present IAM, "
            "Cognito or JWT credentials; each request is authenticated in the webhook function by "
            "its platform's signature or secret token before anything is queued.",
        )
