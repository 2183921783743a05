"""Least privilege: who may do what, read from every policy document in the template."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, TOOL_KEYS
from tests.infra.helpers import Synth, logical_id, ref_or_getatt_target, statements_on

pytestmark = pytest.mark.slow

# CDK adds this statement for active tracing; X-Ray has no resource-level permissions.
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _policy_documents(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    """Every policy document in the template: IAM, queue, log and search-domain resource policies."""
    docs: list[tuple[str, dict[str, Any]]] = []
    for name, resource in synth.raw["Resources"].items():
        props = resource.get("Properties", {})
        match resource["Type"]:
            case "AWS::IAM::Policy" | "AWS::SQS::QueuePolicy":
                docs.append((name, props["PolicyDocument"]))
            case "AWS::IAM::Role":
                docs.extend((name, p["PolicyDocument"]) for p in props.get("Policies", []))
                docs.append((name, props["AssumeRolePolicyDocument"]))
            case "AWS::OpenSearchService::Domain":
                docs.append((name, props["AccessPolicies"]))
            case "AWS::Logs::ResourcePolicy":
                # Rendered as a JSON string around tokens: the literal parts are what matter here.
                joined = props["PolicyDocument"]["Fn::Join"][1]
                # Every token sits inside a JSON string there, so a placeholder keeps it valid JSON.
                text = "".join(part if isinstance(part, str) else "TOKEN" for part in joined)
                docs.append((name, json.loads(text)))
    return docs


def test_no_statement_allows_every_action_or_every_resource(each_stage: Synth) -> None:
    for name, doc in _policy_documents(each_stage):
        for statement in doc["Statement"]:
            actions = set(_as_list(statement.get("Action", [])))
            assert "*" not in actions, name
            assert not any(a.endswith(":*") for a in actions if statement["Effect"] == "Allow"), name
            if "*" in _as_list(statement.get("Resource", [])):
                assert actions == XRAY_ACTIONS, (name, statement)


def test_roles_have_no_managed_policies(each_stage: Synth) -> None:
    for role in each_stage.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]


def _secret_grants(synth: Synth, role_owner: Any) -> tuple[set[str], set[str]]:
    """What a role may read of Secrets Manager: (the keys of the stack's secrets it references,
    the names it is granted by ARN, each as `<name>-??????`: named routes' patterns, and in a stage
    without `all_secrets` the catalogue's secrets the stack did not create)."""
    policy = next(
        r
        for r in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id(role_owner.handler.role)} in r["Properties"]["Roles"]
    )
    secret_ids = {logical_id(s): key for key, s in synth.stack.secrets.secrets.items()}
    referenced: set[str] = set()
    names: set[str] = set()
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        if "secretsmanager:GetSecretValue" not in _as_list(statement["Action"]):
            continue
        for r in _as_list(statement["Resource"]):
            if "Fn::Join" in r:
                parts = r["Fn::Join"][1]
                # arn:<partition>:secretsmanager:<region>:<account>:secret:<name>-??????
                assert parts[-2:-1] == [{"Ref": "AWS::AccountId"}] and parts[-1].startswith(":secret:")
                names.add(parts[-1].removeprefix(":secret:"))
            else:
                referenced.add(secret_ids[ref_or_getatt_target(r)])
    return referenced, names


def _granted_secrets(synth: Synth, role_owner: Any) -> set[str]:
    """The keys of the secrets a role may read, whether the stack created them (granted by
    reference) or not (dev: granted by their exact name, created later by `sigil secret set`)."""
    referenced, names = _secret_grants(synth, role_owner)
    prefix = synth.stack.secrets.prefix
    exact = {n.removeprefix(prefix).removesuffix("-??????") for n in names if "*" not in n}
    # Never both: a secret the stack created is granted by reference alone.
    assert not referenced & exact
    return referenced | exact


def _granted_route_secrets(synth: Synth, role_owner: Any) -> set[str]:
    """The secret name patterns a role may read by ARN (the named routes' secrets)."""
    return {n for n in _secret_grants(synth, role_owner)[1] if "*" in n}


def test_each_function_reads_exactly_the_secrets_it_needs(dev: Synth) -> None:
    stack = dev.stack

    assert _granted_secrets(dev, stack.ingress) == {s.key for s in INGRESS_SECRETS} | {"web/default"}
    # No model in context and Titan embeddings: no provider is reached with a key, so no LLM key
    # is granted (tests/infra/test_infra_models.py has each model choice).
    # and the tools' keys (web_search's Brave key), read only where a workspace turns the tool on
    assert _granted_secrets(dev, stack.agent) == {s.key for s in (*CHANNEL_TOKENS, *TOOL_KEYS)}
    assert _granted_secrets(dev, stack.consolidation) == set()
    # A named route's secrets (telegram/family/webhook-secret): the same keys under any route name,
    # the webhook its ingress secrets, the agent its tokens, each ending in the key
    assert _granted_route_secrets(dev, stack.ingress) == {
        "sigil/telegram/*/webhook-secret-??????",
        "sigil/slack/*/signing-secret-??????",
        "sigil/discord/*/public-key-??????",
        "sigil/whatsapp/*/app-secret-??????",
        "sigil/whatsapp/*/verify-token-??????",
    }
    assert _granted_route_secrets(dev, stack.agent) == {
        "sigil/telegram/*/bot-token-??????",
        "sigil/slack/*/bot-token-??????",
        "sigil/discord/*/bot-token-??????",
        "sigil/whatsapp/*/access-token-??????",
    }
    assert _granted_route_secrets(dev, stack.consolidation) == set()


def test_the_webhook_reads_only_the_routes_partition_of_the_sessions_table(dev: Synth) -> None:
    # Besides it, the day totals of the chat page's uploads (tests/infra/test_infra_uploads.py).
    [statement] = [
        s
        for s in statements_on(dev, dev.stack.ingress, dev.stack.memory.sessions)
        if "dynamodb:GetItem" in _as_list(s["Action"]) and "MEDIA_USAGE" not in json.dumps(s)
    ]
    assert statement["Action"] == "dynamodb:GetItem"
    assert statement["Resource"] == {"Fn::GetAtt": [logical_id(dev.stack.memory.sessions), "Arn"]}
    assert statement["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["ROUTES"]},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def _actions_on(synth: Synth, role_owner: Any, resource: Any) -> set[str]:
    target = logical_id(resource)
    actions: set[str] = set()
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": logical_id(role_owner.handler.role)} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if target in json.dumps(statement["Resource"]):
                actions |= set(_as_list(statement["Action"]))
    return actions


def test_the_webhook_only_queues_and_reads_the_outbox(dev: Synth) -> None:
    stack = dev.stack

    assert "sqs:SendMessage" in _actions_on(dev, stack.ingress, stack.lanes.turns)
    sessions = _actions_on(dev, stack.ingress, stack.memory.sessions)
    assert "dynamodb:Query" in sessions
    # UpdateItem only on the uploads' day totals (tests/infra/test_infra_uploads.py).
    assert not sessions & {"dynamodb:PutItem", "dynamodb:DeleteItem"}
    updates = [
        s
        for s in statements_on(dev, stack.ingress, stack.memory.sessions)
        if "dynamodb:UpdateItem" in _as_list(s["Action"])
    ]
    assert [s["Condition"]["ForAllValues:StringEquals"] for s in updates] == [
        {"dynamodb:LeadingKeys": ["WS#default#MEDIA_USAGE"]}
    ]
    # The memory table: read only, the workspace config and identities the uploads' sender check
    # reads (as the ws function's check before queueing).
    assert _actions_on(dev, stack.ingress, stack.memory.memory) == {"dynamodb:GetItem"}
    assert _actions_on(dev, stack.ingress, stack.memory.domain) == set()
    assert _actions_on(dev, stack.ingress, stack.consolidation.bus) == set()


def test_the_agent_consumes_the_lane_and_publishes_compaction_events(dev: Synth) -> None:
    stack = dev.stack

    lane = _actions_on(dev, stack.agent, stack.lanes.turns)
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= lane
    # A delegated task's steps and outcome go back on the lanes (docs/delegation.md).
    assert "sqs:SendMessage" in lane
    assert _actions_on(dev, stack.agent, stack.consolidation.bus) == {"events:PutEvents"}
    assert "dynamodb:PutItem" in _actions_on(dev, stack.agent, stack.memory.sessions)
    assert "dynamodb:PutItem" in _actions_on(dev, stack.agent, stack.memory.memory)
    assert "es:ESHttpPost" in _actions_on(dev, stack.agent, stack.memory.domain)


def test_the_consolidator_rewrites_memory_and_session_summaries(dev: Synth) -> None:
    stack = dev.stack

    assert "dynamodb:PutItem" in _actions_on(dev, stack.consolidation, stack.memory.memory)
    # The sessions table holds the rolling summary it saves and its leases and checkpoints
    # (shared.adapters.aws.dynamodb.consolidation_state): conditional puts and deletes.
    sessions = _actions_on(dev, stack.consolidation, stack.memory.sessions)
    assert {"dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem"} <= sessions
    assert "es:ESHttpPost" in _actions_on(dev, stack.consolidation, stack.memory.domain)
    # The task sweep puts an overdue task's outcome on its parent's lane; it consumes none.
    assert "sqs:SendMessage" in _actions_on(dev, stack.consolidation, stack.lanes.turns)
    assert "sqs:ReceiveMessage" not in _actions_on(dev, stack.consolidation, stack.lanes.turns)


def test_the_consolidator_reaches_only_its_partitions_of_the_sessions_table(dev: Synth) -> None:
    # Not grant_read_write_data: no Scan, BatchWriteItem or ConditionCheckItem, no index, deletes
    # of its own leases only and updates of budget counters only (tests/infra/
    # test_consolidator_partitions.py matches the patterns against the adapters' keys).
    stack = dev.stack
    statements = statements_on(dev, stack.consolidation, stack.memory.sessions)
    granted = {
        (
            tuple(sorted(_as_list(s["Action"]))),
            tuple(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]),
        )
        for s in statements
    }
    assert granted == {
        (("dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"), ("WS#*",)),
        (("dynamodb:DeleteItem",), ("WS#*#CONSOLIDATION",)),
        (("dynamodb:UpdateItem",), ("WS#*#BUDGET",)),
        (("dynamodb:UpdateItem",), ("WS#*#TASKS",)),
    }
    for statement in statements:
        assert statement["Resource"] == {"Fn::GetAtt": [logical_id(stack.memory.sessions), "Arn"]}
        assert statement["Condition"]["Null"] == {"dynamodb:LeadingKeys": "false"}


def test_only_the_agent_sends_to_the_extraction_queue_and_only_the_consolidator_receives(dev: Synth) -> None:
    stack = dev.stack
    queue = stack.consolidation.extraction
    sent = _actions_on(dev, stack.agent, queue)
    assert "sqs:SendMessage" in sent and "sqs:ReceiveMessage" not in sent and "sqs:DeleteMessage" not in sent
    received = _actions_on(dev, stack.consolidation, queue)
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= received
    assert "sqs:SendMessage" not in received
    assert _actions_on(dev, stack.ingress, queue) == set()


def test_the_webhook_may_query_only_the_web_outbox_partitions(dev: Synth) -> None:
    # The sessions table also holds sessions, identities, budgets and the audit log: the webhook,
    # which only pages a web session's replies, may name no other partition and may not Scan.
    stack = dev.stack

    # Besides the outbox, one GetItem in the routes partition (the next test), and the uploads'
    # day totals and the sender check's budget counters (tests/infra/test_infra_uploads.py)
    [statement] = [
        s for s in statements_on(dev, stack.ingress, stack.memory.sessions) if s["Action"] == "dynamodb:Query"
    ]
    assert statement["Resource"] == {"Fn::GetAtt": [logical_id(stack.memory.sessions), "Arn"]}
    assert statement["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["WS#default#OUTBOX#web.*"]},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def _role_statements(synth: Synth, role: Any) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id(role)} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_schedules_send_only_to_the_turns_queue_and_only_the_agent_manages_them(dev: Synth) -> None:
    # docs/schedules.md: EventBridge Scheduler's role may send to the turns queue and nothing else,
    # and only Scheduler, for this account's schedules of this group, may assume it.
    stack = dev.stack
    role = dev.raw["Resources"][logical_id(stack.schedules.role)]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert "sigil-dev-schedules/*" in json.dumps(trust["Condition"]["ArnLike"])
    statements = _role_statements(dev, stack.schedules.role)
    assert {a for s in statements for a in _as_list(s["Action"])} == {"sqs:SendMessage"}
    assert all(logical_id(stack.lanes.turns) in json.dumps(s["Resource"]) for s in statements)
    # The agent creates and deletes this group's schedules and passes this role, nothing wider.
    scheduler = [
        s for s in _role_statements(dev, stack.agent.handler.role) if "scheduler:" in json.dumps(s["Action"])
    ]
    assert {a for s in scheduler for a in _as_list(s["Action"])} >= {
        "scheduler:CreateSchedule",
        "scheduler:DeleteSchedule",
    }
    assert all("schedule/sigil-dev-schedules/*" in json.dumps(s["Resource"]) for s in scheduler)
    passing = [s for s in _role_statements(dev, stack.agent.handler.role) if s["Action"] == "iam:PassRole"]
    assert [s["Resource"] for s in passing] == [{"Fn::GetAtt": [logical_id(stack.schedules.role), "Arn"]}]
    for owner in (stack.ingress, stack.consolidation):
        assert not any(
            "scheduler:" in json.dumps(s["Action"]) for s in _role_statements(dev, owner.handler.role)
        )


def test_dev_grants_the_secrets_it_did_not_create_by_their_exact_name(dev: Synth, prod: Synth) -> None:
    """dev creates the web signing secret alone (no model in context: no provider key); the other
    keys it reads are granted by their name, so `sigil secret set --stack` can create them later.
    prod creates and references them all."""
    assert set(dev.stack.secrets.secrets) == {"web/default"}
    for owner, keys in ((dev.stack.ingress, INGRESS_SECRETS), (dev.stack.agent, CHANNEL_TOKENS)):
        referenced, names = _secret_grants(dev, owner)
        exact = {n for n in names if "*" not in n}
        assert {f"sigil/{s.key}-??????" for s in keys} <= exact
        assert referenced <= {"web/default"}
    for owner in (prod.stack.ingress, prod.stack.agent, prod.stack.consolidation):
        assert _granted_route_secrets(prod, owner) == _secret_grants(prod, owner)[1]
