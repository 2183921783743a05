"""The stack's resources and their key properties, on the synthesised CloudFormation template."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match
from constructs import Construct

from infra.config import STAGES
from infra.constructs.function import PYTHON_VERSION
from tests.infra.helpers import Synth, logical_id, ref_or_getatt_target

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- lanes


def test_turns_lane_is_fifo_with_content_dedup_sse_and_a_fifo_dead_letter_queue(each_stage: Synth) -> None:
    stack = each_stage.stack
    turns = each_stage.raw["Resources"][logical_id(stack.lanes.turns)]["Properties"]
    dlq = each_stage.raw["Resources"][logical_id(stack.lanes.dead_letters)]["Properties"]

    assert turns["QueueName"] == f"sigil-{each_stage.stage}-turns.fifo"
    assert turns["FifoQueue"] is True
    # On for EventBridge Scheduler (no dedup id of its own); the webhook's explicit ids win.
    assert turns["ContentBasedDeduplication"] is True
    assert turns["SqsManagedSseEnabled"] is True
    assert turns["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [logical_id(stack.lanes.dead_letters), "Arn"]},
        "maxReceiveCount": 5,
    }
    assert dlq["FifoQueue"] is True
    assert dlq["SqsManagedSseEnabled"] is True


def test_visibility_timeout_is_at_least_six_times_the_agent_timeout(dev: Synth) -> None:
    turns = dev.raw["Resources"][logical_id(dev.stack.lanes.turns)]["Properties"]
    agent = dev.raw["Resources"][logical_id(dev.stack.agent.function)]["Properties"]

    assert turns["VisibilityTimeout"] >= 6 * agent["Timeout"]


def test_both_queues_refuse_plain_http(dev: Synth) -> None:
    for queue in (dev.stack.lanes.turns, dev.stack.lanes.dead_letters):
        dev.template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": logical_id(queue)}],
                "PolicyDocument": {
                    "Statement": [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                },
            },
        )


def test_an_alarm_fires_on_any_message_in_the_dead_letter_queue(each_stage: Synth) -> None:
    each_stage.template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [
                {
                    "Name": "QueueName",
                    "Value": {"Fn::GetAtt": [logical_id(each_stage.stack.lanes.dead_letters), "QueueName"]},
                }
            ],
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


# ---------------------------------------------------------------- functions


def test_all_four_functions_are_arm64_on_the_layer_runtime_with_the_cookbook_handler(dev: Synth) -> None:
    functions = dev.resources("AWS::Lambda::Function")
    layer = logical_id(dev.stack.node.find_child("Dependencies").node.find_child("Layer"))

    assert len(functions) == 5  # webhook, agent, consolidate, ws, sandbox precompile
    for function in functions.values():
        props = function["Properties"]
        assert props["Runtime"] == f"python{PYTHON_VERSION}"
        assert props["Architectures"] == ["arm64"]
        assert props["Handler"] == "handler.lambda_handler"
        assert props["Layers"] == [{"Ref": layer}]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["LoggingConfig"]["LogFormat"] == "JSON"


def test_each_function_logs_to_its_own_log_group_with_retention(each_stage: Synth) -> None:
    groups = each_stage.resources("AWS::Logs::LogGroup")
    used = [
        f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        for f in each_stage.resources("AWS::Lambda::Function").values()
    ]

    assert len(set(used)) == 5  # webhook, agent, consolidate, ws, sandbox precompile
    expected_days = {"dev": 14, "team": 30, "prod": 90}[each_stage.stage]
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == expected_days


def test_each_function_gets_the_settings_its_adapters_need(each_stage: Synth) -> None:
    stack = each_stage.stack
    webhook = {
        "SIGIL_BACKEND": "aws",
        "SIGIL_SECRETS_PREFIX": "sigil/",
        "SIGIL_QUEUE_URL": {"Ref": logical_id(stack.lanes.turns)},
        "SIGIL_SESSIONS_TABLE": {"Ref": logical_id(stack.memory.sessions)},
    }
    backend = {
        **webhook,
        "SIGIL_MEMORY_TABLE": {"Ref": logical_id(stack.memory.memory)},
        "SIGIL_EVENT_BUS_NAME": {"Ref": logical_id(stack.consolidation.bus)},
        "SIGIL_OPENSEARCH_ENDPOINT": {"Fn::GetAtt": [logical_id(stack.memory.domain), "DomainEndpoint"]},
        "SIGIL_EMBEDDING_MODEL": "bedrock/amazon.titan-embed-text-v2:0",
    }

    def variables(function: Construct) -> dict[str, Any]:
        props = each_stage.raw["Resources"][logical_id(function)]["Properties"]
        return dict(props["Environment"]["Variables"])

    # The chat page it serves reads the WebSocket API's URL from /config.json.
    sandbox_cache = {"SIGIL_SANDBOX_CACHE_BUCKET": {"Ref": logical_id(stack.sandbox_cache.bucket)}}
    ws_url = {"SIGIL_WS_URL": each_stage.stack.resolve(stack.websocket.stage.url)}
    memory_table = {"SIGIL_MEMORY_TABLE": {"Ref": logical_id(stack.memory.memory)}}
    # Its uploads (docs/web-channel.md#attachments): presigned POSTs to the media bucket, the
    # sender and the limits read from the memory table.
    media_bucket = {"SIGIL_MEDIA_BUCKET": {"Ref": logical_id(stack.media.bucket)}}
    assert variables(stack.ingress.function) == {**webhook, **ws_url, **memory_table, **media_bucket}
    # The WebSocket API's management endpoint: where the agent and the ws function post frames.
    ws_endpoint = {"SIGIL_WS_ENDPOINT": each_stage.stack.resolve(stack.websocket.management_endpoint)}
    assert variables(stack.websocket.function) == {**webhook, **ws_endpoint, **memory_table, **media_bucket}
    # The agent's apology on a turn's last delivery counts on the queue's maxReceiveCount. No
    # model and Titan embeddings: no provider is granted, so none may be used (SIGIL_PROVIDERS).
    assert variables(stack.agent.function) == {
        **backend,
        "SIGIL_LANE_MAX_ATTEMPTS": "5",
        "SIGIL_PROVIDERS": "",
        "SIGIL_SKILLS_BUCKET": {"Ref": logical_id(stack.skills.bucket)},
        "SIGIL_MEDIA_BUCKET": {"Ref": logical_id(stack.media.bucket)},
        "SIGIL_EXTRACTION_QUEUE_URL": {"Ref": logical_id(stack.consolidation.extraction)},
        # Things done later: the schedule group, the role its schedules send as, their target.
        "SIGIL_SCHEDULE_GROUP": f"sigil-{each_stage.stage}-schedules",
        "SIGIL_SCHEDULE_ROLE_ARN": {"Fn::GetAtt": [logical_id(stack.schedules.role), "Arn"]},
        "SIGIL_QUEUE_ARN": {"Fn::GetAtt": [logical_id(stack.lanes.turns), "Arn"]},
        **ws_endpoint,
        # run_python's compiled runtime: read from its cache, asked of the precompile function.
        **sandbox_cache,
        "SIGIL_SANDBOX_PRECOMPILE_FUNCTION": {"Ref": logical_id(stack.sandbox_cache.function)},
    }
    assert variables(stack.consolidation.function) == {**backend, "SIGIL_PROVIDERS": ""}
    # The precompile function builds no backend: it compiles and writes the cache bucket.
    assert variables(stack.sandbox_cache.function) == sandbox_cache


def test_the_agent_reads_the_lanes_in_batches_of_ten_reporting_item_failures(each_stage: Synth) -> None:
    stack = each_stage.stack

    # The agent's, and the consolidator's extraction queue (test_the_extraction_queue_...)
    each_stage.template.resource_count_is("AWS::Lambda::EventSourceMapping", 2)
    each_stage.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [logical_id(stack.lanes.turns), "Arn"]},
            "FunctionName": {"Ref": logical_id(stack.agent.function)},
            "BatchSize": 10,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


def test_the_extraction_queue_delays_turns_for_the_consolidator_encrypted_with_a_dead_letter_queue(
    each_stage: Synth,
) -> None:
    stack = each_stage.stack
    consolidation = stack.consolidation
    queue = each_stage.raw["Resources"][logical_id(consolidation.extraction)]["Properties"]
    dlq = each_stage.raw["Resources"][logical_id(consolidation.extraction_dead_letters)]["Properties"]
    consolidate = each_stage.raw["Resources"][logical_id(consolidation.function)]["Properties"]
    # A standard queue (DelaySeconds per message is refused by FIFO queues), encrypted, whose
    # failed messages go to their own encrypted dead-letter queue
    assert "FifoQueue" not in queue and queue["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [logical_id(consolidation.extraction_dead_letters), "Arn"]},
        "maxReceiveCount": 3,
    }
    assert dlq["SqsManagedSseEnabled"] is True
    assert queue["VisibilityTimeout"] >= 6 * consolidate["Timeout"]
    # Received by the consolidate function, reporting the failed records only
    each_stage.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [logical_id(consolidation.extraction), "Arn"]},
            "FunctionName": {"Ref": logical_id(consolidation.function)},
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )
    # Both refuse plain HTTP
    for q in (consolidation.extraction, consolidation.extraction_dead_letters):
        each_stage.template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": logical_id(q)}],
                "PolicyDocument": {
                    "Statement": [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                },
            },
        )


def test_function_bundles_hold_the_handler_folder_and_the_shared_package(dev: Synth) -> None:
    for function in (dev.stack.ingress.function, dev.stack.agent.function, dev.stack.consolidation.function):
        code = dev.raw["Resources"][logical_id(function)]["Properties"]["Code"]
        bundle = dev.outdir / f"asset.{code['S3Key'].removesuffix('.zip')}"

        assert (bundle / "handler.py").is_file()
        assert (bundle / "shared" / "__init__.py").is_file()
        assert (bundle / "shared" / "config.py").is_file()
        assert not list(bundle.rglob("__pycache__"))


# ---------------------------------------------------------------- memory


def test_tables_are_on_demand_with_pitr_sse_and_ttl(each_stage: Synth) -> None:
    tables = each_stage.resources("AWS::DynamoDB::Table")

    assert len(tables) == 2
    for table in tables.values():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["SSESpecification"] == {"SSEEnabled": True}
        assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    retained = {"dev": False, "team": True, "prod": True}[each_stage.stage]
    assert all((t["DeletionPolicy"] == "Retain") is retained for t in tables.values())


def test_table_keys_are_the_ones_the_dynamodb_adapter_declares(dev: Synth) -> None:
    # The adapter's moto tables are built from TABLE_SCHEMAS: the cloud tables must match them.
    from shared.adapters.aws.dynamodb import TABLE_SCHEMAS, TABLE_TTL

    for kind, table in (("sessions", dev.stack.memory.sessions), ("memory", dev.stack.memory.memory)):
        props = dev.raw["Resources"][logical_id(table)]["Properties"]
        schema = TABLE_SCHEMAS[kind]
        assert props["KeySchema"] == schema["KeySchema"]
        assert sorted(props["AttributeDefinitions"], key=str) == sorted(
            schema["AttributeDefinitions"], key=str
        )
        assert props.get("GlobalSecondaryIndexes", []) == schema.get("GlobalSecondaryIndexes", [])
        # Every TTL the adapter relies on is enabled (the stack enables `ttl` on both tables).
        if TABLE_TTL[kind] is not None:
            assert props["TimeToLiveSpecification"]["AttributeName"] == TABLE_TTL[kind]


def test_the_memory_table_indexes_triples_by_subject_and_by_object(dev: Synth) -> None:
    props = dev.raw["Resources"][logical_id(dev.stack.memory.memory)]["Properties"]

    assert [
        (i["IndexName"], [k["AttributeName"] for k in i["KeySchema"]])
        for i in props["GlobalSecondaryIndexes"]
    ] == [("GSI1", ["gsi1pk", "gsi1sk"]), ("GSI2", ["gsi2pk", "gsi2sk"])]


def test_search_domain_is_encrypted_https_only_and_admits_only_the_two_roles(each_stage: Synth) -> None:
    stack = each_stage.stack
    props = each_stage.raw["Resources"][logical_id(stack.memory.domain)]["Properties"]

    assert props["NodeToNodeEncryptionOptions"] == {"Enabled": True}
    assert props["EncryptionAtRestOptions"] == {"Enabled": True}
    assert props["DomainEndpointOptions"] == {
        "EnforceHTTPS": True,
        "TLSSecurityPolicy": "Policy-Min-TLS-1-2-PFS-2023-10",
    }
    (statement,) = props["AccessPolicies"]["Statement"]
    assert statement["Effect"] == "Allow"
    principals = {ref_or_getatt_target(p) for p in statement["Principal"]["AWS"]}
    assert principals == {
        logical_id(stack.agent.handler.role),
        logical_id(stack.consolidation.handler.role),
    }
    assert all(action.startswith("es:ESHttp") for action in statement["Action"])
    assert "Condition" not in statement


def test_dev_search_is_one_small_node(dev: Synth) -> None:
    config = dev.raw["Resources"][logical_id(dev.stack.memory.domain)]["Properties"]["ClusterConfig"]
    ebs = dev.raw["Resources"][logical_id(dev.stack.memory.domain)]["Properties"]["EBSOptions"]

    # The smallest data node and volume OpenSearch Service offers (docs/cost.md#the-floors).
    assert config["InstanceType"] == "t3.small.search"
    assert ebs["VolumeSize"] == 10
    assert config["InstanceCount"] == 1
    assert config["DedicatedMasterEnabled"] is False
    assert config["ZoneAwarenessEnabled"] is False


def test_prod_search_spreads_over_three_zones_with_dedicated_masters(prod: Synth) -> None:
    config = prod.raw["Resources"][logical_id(prod.stack.memory.domain)]["Properties"]["ClusterConfig"]

    assert config["InstanceCount"] == 3
    assert config["ZoneAwarenessEnabled"] is True
    assert config["ZoneAwarenessConfig"] == {"AvailabilityZoneCount": 3}
    assert config["DedicatedMasterEnabled"] is True
    assert config["DedicatedMasterCount"] == 3


def test_team_search_spreads_three_data_nodes_over_three_zones_without_masters(team: Synth) -> None:
    config = team.raw["Resources"][logical_id(team.stack.memory.domain)]["Properties"]["ClusterConfig"]

    assert (config["InstanceCount"], config["InstanceType"]) == (3, "m7g.large.search")
    assert config["ZoneAwarenessEnabled"] is True
    assert config["ZoneAwarenessConfig"] == {"AvailabilityZoneCount": 3}
    # Three master-eligible data nodes keep a quorum when one is lost.
    assert config["DedicatedMasterEnabled"] is False


def test_team_retains_its_data_as_prod_does(team: Synth, prod: Synth) -> None:
    for synth in (team, prod):
        for kind in ("AWS::DynamoDB::Table", "AWS::OpenSearchService::Domain", "AWS::SecretsManager::Secret"):
            for resource in synth.resources(kind).values():
                assert resource["DeletionPolicy"] == "Retain", (synth.stage, kind)
        for table in synth.resources("AWS::DynamoDB::Table").values():
            assert table["Properties"]["DeletionProtectionEnabled"] is True


def test_search_logs_go_to_log_groups_the_service_may_write(dev: Synth) -> None:
    props = dev.raw["Resources"][logical_id(dev.stack.memory.domain)]["Properties"]
    published = props["LogPublishingOptions"]

    assert set(published) == {"SEARCH_SLOW_LOGS", "INDEX_SLOW_LOGS", "ES_APPLICATION_LOGS"}
    assert all(option["Enabled"] for option in published.values())
    dev.template.resource_count_is("AWS::Logs::ResourcePolicy", 1)
    # No custom resource (and so no Lambda function of CDK's own) writes policies for the domain.
    dev.template.resource_count_is("Custom::OpenSearchAccessPolicy", 0)
    dev.template.resource_count_is("Custom::CloudwatchLogResourcePolicy", 0)


# ---------------------------------------------------------------- consolidation


def test_compaction_events_on_the_custom_bus_start_the_consolidator(each_stage: Synth) -> None:
    stack = each_stage.stack

    each_stage.template.resource_count_is("AWS::Events::EventBus", 1)
    each_stage.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventBusName": {"Ref": logical_id(stack.consolidation.bus)},
            "EventPattern": {"source": ["sigil"], "detail-type": Match.array_with(["CompactionDue"])},
            "Targets": [
                Match.object_like({"Arn": {"Fn::GetAtt": [logical_id(stack.consolidation.function), "Arn"]}})
            ],
        },
    )


def test_an_hourly_schedule_starts_the_consolidator(each_stage: Synth) -> None:
    each_stage.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(1 hour)",
            "Targets": [
                Match.object_like(
                    {"Arn": {"Fn::GetAtt": [logical_id(each_stage.stack.consolidation.function), "Arn"]}}
                )
            ],
        },
    )


# ---------------------------------------------------------------- ingress


def test_one_route_per_channel_all_to_the_webhook(each_stage: Synth) -> None:
    # The HTTP API's (the WebSocket API's routes: test_infra_websocket.py)
    http_api = {"Ref": logical_id(each_stage.stack.ingress.api)}
    routes = {
        k: r
        for k, r in each_stage.resources("AWS::ApiGatewayV2::Route").items()
        if r["Properties"]["ApiId"] == http_api
    }
    integrations = {
        k: r
        for k, r in each_stage.resources("AWS::ApiGatewayV2::Integration").items()
        if r["Properties"]["ApiId"] == http_api
    }

    assert {r["Properties"]["RouteKey"] for r in routes.values()} == {
        "POST /webhooks/web/{workspace}",
        "POST /webhooks/telegram",
        "POST /webhooks/slack",
        "POST /webhooks/discord",
        "POST /webhooks/whatsapp",
        "GET /webhooks/whatsapp",
        "POST /webhooks/telegram/{name}",
        "POST /webhooks/slack/{name}",
        "POST /webhooks/discord/{name}",
        "POST /webhooks/whatsapp/{name}",
        "GET /webhooks/whatsapp/{name}",
        # The chat page (shared.channels.web_page), served by the webhook too.
        "GET /",
        "GET /config.json",
        "GET /assets/{name}",
        "GET /sessions/{workspace}/{session}/outbox",
        # The chat page's uploads (shared.media.upload).
        "POST /media/{workspace}/uploads",
        "POST /media/{workspace}/uploads/{media_id}",
    }
    (integration,) = integrations.values()
    assert integration["Properties"]["IntegrationUri"] == {
        "Fn::GetAtt": [logical_id(each_stage.stack.ingress.function), "Arn"]
    }
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"


def test_the_api_stage_logs_access_and_throttles(dev: Synth) -> None:
    dev.template.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {
            "StageName": "$default",
            "AutoDeploy": True,
            "AccessLogSettings": {
                "DestinationArn": Match.any_value(),
                "Format": Match.string_like_regexp(r"\$context\.requestId"),
            },
            "DefaultRouteSettings": {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100},
        },
    )


# ---------------------------------------------------------------- secrets


def test_secrets_live_under_the_sigil_prefix(each_stage: Synth) -> None:
    names = {s["Properties"]["Name"] for s in each_stage.resources("AWS::SecretsManager::Secret").values()}

    # dev creates the web signing secret and the granted providers' keys (none without a model);
    # the others are created by `sigil secret set --stack` (test_infra_policies checks the grants).
    if not STAGES[each_stage.stage].all_secrets:
        assert names == {"sigil/web/default"}
        return
    assert names == {
        "sigil/web/default",
        "sigil/telegram/webhook-secret",
        "sigil/telegram/bot-token",
        "sigil/slack/signing-secret",
        "sigil/slack/bot-token",
        "sigil/discord/public-key",
        "sigil/discord/bot-token",
        "sigil/whatsapp/app-secret",
        "sigil/whatsapp/verify-token",
        "sigil/whatsapp/access-token",
        "sigil/llm/openai-api-key",
        "sigil/llm/anthropic-api-key",
        "sigil/web-search/brave-api-key",
    }
    # No value passes through the template: each one starts random and is set afterwards.
    for secret in each_stage.resources("AWS::SecretsManager::Secret").values():
        assert "SecretString" not in secret["Properties"]
        assert "GenerateSecretString" in secret["Properties"]
