"""The web channel's WebSocket API (infra/constructs/websocket.py) and the HTTP API's CORS, as synthesised.

cdk-nag and cfn-lint run over the same templates in test_infra_checks.py; these check the wiring:
the routes, who may post to connections, the ws function's narrow grants, the endpoint the agent
is told, and that CORS admits the `web_origin` context's origin only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.constructs.websocket import CONNECTION_PARTITIONS, STAGE_NAME
from shared.adapters.aws.dynamodb.budgets import COUNTER_SHARDS
from tests.infra.helpers import Synth, logical_id, synthesize

ORIGIN = "https://chat.example.com"


@pytest.fixture(scope="module")
def with_origin(tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path) -> Iterator[Synth]:
    yield synthesize("dev", tmp_path_factory.mktemp("cdk-origin"), stand_in_layer, web_origin=ORIGIN)


def _ws_api(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(name, api)] = [
        (k, r)
        for k, r in synth.resources("AWS::ApiGatewayV2::Api").items()
        if r["Properties"].get("ProtocolType") == "WEBSOCKET"
    ]
    return name, api


def _statements(synth: Synth, function: Any) -> list[dict[str, Any]]:
    role = synth.raw["Resources"][logical_id(function)]["Properties"]["Role"]["Fn::GetAtt"][0]
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def _leading_keys(statement: dict[str, Any]) -> list[str]:
    conditions = statement["Condition"]
    [keys] = [c["dynamodb:LeadingKeys"] for op, c in conditions.items() if op.startswith("ForAllValues")]
    return list(keys)


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_the_websocket_api_routes_connect_disconnect_and_default_to_the_ws_function(
    each_stage: Synth,
) -> None:
    name, api = _ws_api(each_stage)
    assert api["Properties"]["RouteSelectionExpression"] == "$request.body.action"
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in each_stage.resources("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": name}
    }
    assert set(routes) == {"$connect", "$disconnect", "$default"}
    integrations = [
        r["Properties"]
        for r in each_stage.resources("AWS::ApiGatewayV2::Integration").values()
        if r["Properties"]["ApiId"] == {"Ref": name}
    ]
    ws_function = logical_id(each_stage.stack.websocket.function)
    assert integrations and all(ws_function in str(i["IntegrationUri"]) for i in integrations)


def test_the_stage_logs_access_and_is_throttled(each_stage: Synth) -> None:
    name, _ = _ws_api(each_stage)
    [stage] = [
        r["Properties"]
        for r in each_stage.resources("AWS::ApiGatewayV2::Stage").values()
        if r["Properties"]["ApiId"] == {"Ref": name}
    ]
    assert stage["StageName"] == STAGE_NAME
    assert "$context.connectionId" in stage["AccessLogSettings"]["Format"]
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0
    assert stage["DefaultRouteSettings"]["ThrottlingBurstLimit"] > 0


def test_only_the_agent_and_the_ws_function_may_post_to_connections_and_only_on_this_api(
    each_stage: Synth,
) -> None:
    name, _ = _ws_api(each_stage)
    stack = each_stage.stack
    posting = {}
    for label, function in (
        ("agent", stack.agent.function),
        ("ws", stack.websocket.function),
        ("webhook", stack.ingress.function),
        ("consolidate", stack.consolidation.function),
    ):
        manage = [
            s for s in _statements(each_stage, function) if "execute-api:ManageConnections" in _actions(s)
        ]
        posting[label] = manage
    assert not posting["webhook"] and not posting["consolidate"]
    for label in ("agent", "ws"):
        [statement] = posting[label]
        assert statement["Effect"] == "Allow"
        # The resource is this API's execute-api ARN, never a wildcard over every API
        assert {"Ref": name} in statement["Resource"]["Fn::Join"][1], statement["Resource"]


def test_the_agent_and_the_ws_function_are_told_the_management_endpoint(each_stage: Synth) -> None:
    stack = each_stage.stack
    for function in (stack.agent.function, stack.websocket.function):
        env = each_stage.raw["Resources"][logical_id(function)]["Properties"]["Environment"]["Variables"]
        endpoint = env["SIGIL_WS_ENDPOINT"]
        assert "https://" in str(endpoint) and f"/{STAGE_NAME}" in str(endpoint)
    outputs = each_stage.raw["Outputs"]
    assert "wss://" in str(outputs["WebSocketUrl"]["Value"])


def test_the_ws_function_reaches_only_the_connection_items_and_the_outbox(each_stage: Synth) -> None:
    stack = each_stage.stack
    table = logical_id(stack.memory.sessions)
    on_table = [s for s in _statements(each_stage, stack.websocket.function) if table in str(s["Resource"])]
    by_keys = {tuple(sorted(_leading_keys(s))): _actions(s) for s in on_table}
    # Every statement on the sessions table is pinned to partitions: no whole-table access
    assert all("Condition" in s for s in on_table)
    assert sorted(by_keys[tuple(sorted(CONNECTION_PARTITIONS))]) == sorted(
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"]
    )
    # The outbox (resume) and the budget counters (the check before queueing), read-only
    others = {keys: a for keys, a in by_keys.items() if keys != tuple(sorted(CONNECTION_PARTITIONS))}
    assert sorted(map(tuple, others.values())) == [("dynamodb:BatchGetItem",), ("dynamodb:Query",)]
    # every shard of the counters, whose sum a check reads
    shards = ("WS#default#BUDGET", *(f"WS#default#BUDGET#{n}" for n in range(1, COUNTER_SHARDS)))
    shards = tuple(sorted(shards))
    assert others[shards] == ["dynamodb:BatchGetItem"]
    # In the memory table: each web workspace's config and identities, by key
    memory = logical_id(stack.memory.memory)
    on_memory = [s for s in _statements(each_stage, stack.websocket.function) if memory in str(s["Resource"])]
    found = [(_actions(s), _leading_keys(s)) for s in on_memory]
    assert found == [(["dynamodb:GetItem"], ["WS#default", "WS#default#IDENTITY"])]
    # And it may send to the lanes, as the webhook does
    queue = logical_id(stack.lanes.turns)
    sends = [s for s in _statements(each_stage, stack.websocket.function) if queue in str(s["Resource"])]
    assert any("sqs:SendMessage" in _actions(s) for s in sends)


def test_cors_admits_the_pages_origin_only(with_origin: Synth, dev: Synth) -> None:
    http = [
        r["Properties"]
        for r in with_origin.resources("AWS::ApiGatewayV2::Api").values()
        if r["Properties"].get("ProtocolType") == "HTTP"
    ]
    [api] = http
    cors = api["CorsConfiguration"]
    assert cors["AllowOrigins"] == [ORIGIN]
    assert "*" not in str(cors)
    assert {"x-sigil-timestamp", "x-sigil-signature"} <= set(cors["AllowHeaders"])
    # Without the context value, no CORS at all: no origin is admitted
    [plain] = [
        r["Properties"]
        for r in dev.resources("AWS::ApiGatewayV2::Api").values()
        if r["Properties"].get("ProtocolType") == "HTTP"
    ]
    assert "CorsConfiguration" not in plain
    # And the WebSocket handshake admits the same origin, and the HTTP API's own (which serves the
    # chat page), alone (SIGIL_WEB_ORIGINS of the ws function)
    ws_env = with_origin.raw["Resources"][logical_id(with_origin.stack.websocket.function)]["Properties"]
    origins = ws_env["Environment"]["Variables"]["SIGIL_WEB_ORIGINS"]
    api = {"Fn::GetAtt": [logical_id(with_origin.stack.ingress.api), "ApiEndpoint"]}
    assert origins["Fn::Join"][1] == [f'["{ORIGIN}", "', api, '"]']


@pytest.mark.parametrize("bad", ["*", "https://*.example.com", "https://chat.example.com/page", "ftp://x"])
def test_web_origin_must_be_one_origin(tmp_path: Path, stand_in_layer: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="web_origin must be one origin"):
        synthesize("dev", tmp_path, stand_in_layer, web_origin=bad)
