"""The web channel's WebSocket API: browsers connect with a browser token and get replies as they stream.

Three routes ($connect, $disconnect, $default) go to one function (functions/ws), which verifies
the token on $connect, records the connection in the sessions table, and queues `send` frames on
the lanes as the webhook does. The agent posts deltas and replies to the connections through the
stage's management endpoint (`execute-api:ManageConnections` on this API alone), and so does the
ws function (its answers are frames too). docs/web-streaming-cloud.md has the protocol.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import CfnElement, Duration, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import Throttle
from infra.constructs.function import SigilFunction
from infra.constructs.ingress import AccessLogs
from infra.constructs.nag import acknowledge
from shared.adapters.aws.dynamodb.budgets import COUNTER_SHARDS, counter_pk

STAGE_NAME = "live"
ROUTE_KEYS = ("$connect", "$disconnect", "$default")
# The $context variables of a WebSocket API access log (they differ from an HTTP API's): the
# connection and event type say which socket did what; the request id ties a line to the function's.
ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "eventType": "$context.eventType",
    "connectionId": "$context.connectionId",
    "status": "$context.status",
    "integrationLatency": "$context.integration.latency",
    "integrationError": "$context.integration.error",
    "error": "$context.error.message",
}
# The connection items' partition keys (shared/adapters/aws/dynamodb/connections.py): the ws
# function reads and writes these and nothing else of the sessions table.
CONNECTION_PARTITIONS = ("CONN#*", "WS#*#LISTEN#*")


class WebSocket(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
        access_log_group: logs.ILogGroup,
        reserved_concurrency: int | None,
        throttle: Throttle,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = SigilFunction(
            self,
            "Handler",
            source="ws",
            description="Sigil WebSocket API: browser tokens, connections, frames onto the lanes",
            # A token check and a DynamoDB write, or one SendMessage: milliseconds. A `resume`
            # posts at most a few hundred replies.
            timeout=Duration.seconds(15),
            memory_size=512,
            layer=layer,
            log_group=log_group,
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        integration = integrations.WebSocketLambdaIntegration("Ws", self.function)
        self.api = apigwv2.WebSocketApi(
            self,
            "Api",
            description="Sigil web channel: browsers' WebSocket connections",
            connect_route_options=apigwv2.WebSocketRouteOptions(integration=integration),
            disconnect_route_options=apigwv2.WebSocketRouteOptions(integration=integration),
            default_route_options=apigwv2.WebSocketRouteOptions(integration=integration),
        )
        self.stage = apigwv2.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=STAGE_NAME,
            auto_deploy=True,
            access_log_settings=AccessLogs(access_log_group, ACCESS_LOG_FORMAT),
            # Messages per second over the whole stage: each `send` may become a turn.
            throttle=apigwv2.ThrottleSettings(rate_limit=throttle.rate, burst_limit=throttle.burst),
        )
        # The function answers in frames posted to its own connections.
        self.grant_post_to_connections(self.function)
        acknowledge(
            self.api,
            "AwsSolutions-APIG4",
            "Browsers cannot present IAM, Cognito or JWT credentials on a WebSocket handshake; "
            "$connect is authenticated in the ws function by the browser token in the query "
            "string (signed with a key derived from the workspace's web secret), and every later "
            "frame is checked against the connection that token opened.",
        )

    @property
    def management_endpoint(self) -> str:
        """https://{api}.execute-api.{region}.amazonaws.com/{stage}: where connections are posted to."""
        return self.stage.callback_url

    def grant_post_to_connections(self, function: lambda_.Function) -> None:
        """execute-api:ManageConnections on this API's stage's connections, and no other API's.

        CDK's WebSocketApi.grant_manage_connections names every stage and method (`*/*`); this
        names the one stage and POST, the only call made (post_to_connection).
        """
        stack = Stack.of(self)
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["execute-api:ManageConnections"],
                resources=[
                    stack.format_arn(
                        service="execute-api",
                        resource=self.api.api_id,
                        resource_name=f"{STAGE_NAME}/POST/@connections/*",
                    )
                ],
            )
        )
        cfn = self.api.node.default_child
        assert isinstance(cfn, CfnElement)
        role = function.role
        assert role is not None
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:"
            f"<{stack.get_logical_id(cfn)}>/{STAGE_NAME}/POST/@connections/*]",
            "A connection id is known only when a browser connects, so the grant names this API's "
            "stage and POST on its @connections path; it reaches no other API, stage or method.",
        )

    def grant_connections(self, function: lambda_.Function, sessions: dynamodb.ITable) -> None:
        """The ws function's reach into the sessions table: the connection items alone."""
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"],
                resources=[sessions.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(CONNECTION_PARTITIONS)},
                    # ForAllValues holds for a request naming no partition key; these all name one.
                    "Null": {"dynamodb:LeadingKeys": "false"},
                },
            )
        )

    def grant_admission(
        self,
        function: lambda_.Function,
        *,
        memory: dynamodb.ITable,
        sessions: dynamodb.ITable,
        workspaces: Iterable[str],
    ) -> None:
        """What the check before queueing reads (shared.ingress.ws.Admission), read-only and only
        in the web workspaces: each one's config and identities, and its budget counters."""
        names = list(workspaces)
        shards = range(COUNTER_SHARDS)
        for table, actions, partitions in (
            (memory, ["dynamodb:GetItem"], [f"WS#{w}" for w in names] + [f"WS#{w}#IDENTITY" for w in names]),
            # Every shard of the counters: a total is their sum (docs/budgets.md#dynamodb).
            (sessions, ["dynamodb:BatchGetItem"], [counter_pk(w, n) for w in names for n in shards]),
        ):
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=actions,
                    resources=[table.table_arn],
                    conditions={
                        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": partitions},
                        "Null": {"dynamodb:LeadingKeys": "false"},
                    },
                )
            )
