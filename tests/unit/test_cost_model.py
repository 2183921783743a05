"""bench/cost.py's arithmetic on hand-made usage: DynamoDB's item sizes and request units, SQS's
64 KB chunks, Lambda's GB-seconds with the model's wait, AgentCore's units and a stage's floor."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from bench import cost

# Round prices, so every expected figure below can be checked by hand.
PRICES = {
    "lambda_gb_s_arm64": {"usd": 0.00001},
    "lambda_gb_s_x86_64": {"usd": 0.00002},
    "lambda_requests": {"usd": 0.20},
    "http_api_requests": {"usd": 1.00},
    "sqs_fifo_requests": {"usd": 0.50},
    "sqs_standard_requests": {"usd": 0.40},
    "dynamodb_rru": {"usd": 0.125},
    "dynamodb_wru": {"usd": 0.625},
    "dynamodb_storage": {"usd": 0.25},
    "dynamodb_pitr": {"usd": 0.20},
    "eventbridge_custom_events": {"usd": 1.00},
    "secrets_api_calls": {"usd": 0.05},
    "secrets_secret_month": {"usd": 0.40},
    "cloudwatch_logs_ingest": {"usd": 0.50},
    "cloudwatch_alarm": {"usd": 0.10},
    "cloudwatch_dashboard": {"usd": 3.00},
    "kms_key_month": {"usd": 1.00},
    "xray_traces": {"usd": 5.00},
    "bedrock_titan_embed_v2": {"usd": 0.00002},
    "opensearch_instance_hour": {"usd": {"t3.medium.search": 0.10}},
    "opensearch_gp3_gb_month": {"usd": 0.10},
    "agentcore_stm_events": {"usd": 0.25},
    "agentcore_ltm_storage": {"usd": 0.75},
    "agentcore_ltm_retrieval": {"usd": 0.50},
}
FUNCTIONS = {"agent": cost.FunctionConfig(memory_mb=1024, architecture="arm64")}


def by_item(lines: list[cost.Line]) -> dict[str, cost.Line]:
    return {line.item: line for line in lines}


def test_a_dynamodb_item_is_sized_by_its_names_and_values() -> None:
    item = {
        "pk": {"S": "ab"},  # 2 + 2
        "n": {"N": "-123.45"},  # 1 + (5 significant digits -> 3) + 1
        "ok": {"BOOL": True},  # 2 + 1
        "l": {"L": [{"S": "xyz"}, {"NULL": True}]},  # 1 + 3 + (1 + 3) + (1 + 1)
        "m": {"M": {"k": {"S": "v"}}},  # 1 + 3 + (1 + 1 + 1)
        "b": {"B": b"\x00\x01\x02"},  # 1 + 3
        "é": {"S": "é"},  # 2 + 2: UTF-8 bytes, not characters
    }
    assert cost.item_size(item) == 4 + 5 + 3 + 10 + 7 + 4 + 4
    assert cost.item_size(None) == 0


def test_reads_are_charged_per_4_kb_and_writes_per_1_kb_at_least_one_unit() -> None:
    # 5 KB: two 4 KB units; eventually consistent halves them, a transaction doubles them
    assert cost.read_units(5 * 1024, consistent=False) == 1.0
    assert cost.read_units(5 * 1024, consistent=True) == 2.0
    assert cost.read_units(5 * 1024, consistent=False, transactional=True) == 4.0
    # An item not found, or a Query that matched nothing, still costs the minimum
    assert cost.read_units(0, consistent=False) == 0.5
    assert cost.read_units(4 * 1024, consistent=True) == 1.0
    assert cost.write_units(1024) == 1.0
    assert cost.write_units(1025) == 2.0
    assert cost.write_units(1500, transactional=True) == 4.0
    assert cost.write_units(0) == 1.0


def test_sqs_http_and_eventbridge_payloads_are_billed_in_chunks() -> None:
    usage = cost.Usage(
        turns=1,
        sqs_payloads=[0, 64 * 1024, 64 * 1024 + 1, 200 * 1024],  # 1 + 1 + 2 + 4
        http_requests=[100, 512 * 1024 + 1],  # 1 + 2
        event_sizes=[300, 65 * 1024],  # 1 + 2
    )
    lines = by_item(cost.price_usage(usage, {}, PRICES, wait_s=3))
    assert lines["SQS FIFO"].quantity == 8
    assert lines["SQS FIFO"].usd == pytest.approx(8 * 0.50 / 1e6)
    assert lines["API Gateway HTTP API"].quantity == 3
    assert lines["API Gateway HTTP API"].usd == pytest.approx(3 / 1e6)
    assert lines["EventBridge events"].quantity == 3
    assert lines["SQS standard"].quantity == 0


def test_standard_queue_requests_and_the_consolidation_models_tokens_are_priced_apart() -> None:
    usage = cost.Usage(
        turns=1,
        sqs_payloads=[100],
        sqs_standard_payloads=[100, 64 * 1024 + 1],  # 1 + 2, at the standard price
        model_chars_in=4_000_000,  # 1M tokens at 4 characters a token
        model_chars_out=400_000,  # 100k tokens
    )
    lines = by_item(cost.price_usage(usage, {}, PRICES, wait_s=3, model_per_mtok=(0.40, 1.60)))
    assert lines["SQS FIFO"].quantity == 1
    assert lines["SQS standard"].quantity == 3
    assert lines["SQS standard"].usd == pytest.approx(3 * 0.40 / 1e6)
    model = lines["consolidation model tokens (est.)"]
    assert model.quantity == pytest.approx(1_100_000)
    assert model.usd == pytest.approx(0.40 + 0.1 * 1.60)
    # Without a price (the default) the tokens are shown and cost nothing
    unpriced = by_item(cost.price_usage(usage, {}, PRICES, wait_s=3))
    assert unpriced["consolidation model tokens (est.)"].usd == 0


def test_lambda_is_billed_on_its_own_work_plus_the_model_wait_rounded_up_per_invocation() -> None:
    invocations = [
        cost.Invocation("agent", own_ms=100.2, model_calls=2),  # 100.2 + 6000 -> 6101 ms
        cost.Invocation("agent", own_ms=49.5, model_calls=0),  # -> 50 ms
        cost.Invocation("webhook", own_ms=10.0),  # another function: not the agent's
    ]
    assert cost.lambda_gb_s(invocations[:2], 1024, wait_s=3) == pytest.approx(6.151)
    assert cost.lambda_gb_s(invocations[:2], 512, wait_s=15) == pytest.approx((30_101 + 50) / 1000 / 2)
    usage = cost.Usage(turns=2, invocations=invocations)
    lines = by_item(cost.price_usage(usage, FUNCTIONS, PRICES, wait_s=3))
    assert lines["Lambda agent (1024 MB arm64)"].usd == pytest.approx(6.151 * 0.00001)
    assert lines["Lambda requests"].quantity == 3
    assert lines["X-Ray traces"].quantity == 3


def test_the_other_lines_and_the_scaling_to_1000_turns() -> None:
    usage = cost.Usage(
        turns=4,
        dynamodb_rru=8.5,
        dynamodb_wru=40.0,
        dynamodb_stored_bytes=2 * cost.GB,
        secrets_calls=20_000,
        log_bytes=Counter({"agent": cost.GB, "webhook": cost.GB}),
        embedding_chars=4000,
    )
    lines = by_item(cost.scaled(cost.price_usage(usage, {}, PRICES, wait_s=3), 1000 / usage.turns))
    assert lines["DynamoDB reads"].usd == pytest.approx(8.5 * 250 * 0.125 / 1e6)
    assert lines["DynamoDB writes"].quantity == 10_000
    assert lines["DynamoDB writes"].usd == pytest.approx(10_000 * 0.625 / 1e6)
    assert lines["DynamoDB storage + PITR, 1 month"].usd == pytest.approx(250 * 2 * 0.45)
    assert lines["Secrets Manager calls"].usd == pytest.approx(250 * 2 * 0.05)
    assert lines["CloudWatch Logs ingestion"].usd == pytest.approx(250 * 2 * 0.50)
    assert lines["Bedrock Titan embeddings (est.)"].quantity == 250 * 1000  # 4 characters a token


def test_agentcore_units_are_priced_per_thousand() -> None:
    usage = cost.Usage(turns=1000, messages_stored=3000, ltm_records=200, retrievals=400)
    lines = by_item(cost.agentcore_lines(usage, PRICES))
    assert lines["short-term memory events"].usd == pytest.approx(0.75)
    assert lines["long-term records stored, 1 month"].usd == pytest.approx(0.15)
    assert lines["long-term retrievals"].usd == pytest.approx(0.20)


def test_a_stage_floor_follows_its_template() -> None:
    template = {
        "Resources": {
            "Search": {
                "Type": "AWS::OpenSearchService::Domain",
                "Properties": {
                    "ClusterConfig": {"InstanceCount": 2, "InstanceType": "t3.medium.search"},
                    "EBSOptions": {"EBSEnabled": True, "VolumeSize": 10, "VolumeType": "gp3"},
                },
            },
            **{f"S{i}": {"Type": "AWS::SecretsManager::Secret", "Properties": {}} for i in range(3)},
            "A1": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}},
            # a metric-math alarm reading two metrics is charged for both
            "A2": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {"Metrics": [{"MetricStat": {}}, {"MetricStat": {}}, {"Expression": "m1/m2"}]},
            },
            "D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
            "K": {"Type": "AWS::KMS::Key", "Properties": {}},
            "Hourly": {"Type": "AWS::Events::Rule", "Properties": {"ScheduleExpression": "rate(1 hour)"}},
        }
    }
    # One scheduled run: 1,000 ms at 1024 MB, no model call
    schedule = cost.Usage(turns=1, invocations=[cost.Invocation("agent", own_ms=1000.0)])
    lines = by_item(cost.floor_lines(template, PRICES, schedule, FUNCTIONS))
    assert lines["OpenSearch data nodes"].usd == pytest.approx(2 * 0.10 * 730)
    assert lines["OpenSearch storage"].usd == pytest.approx(20 * 0.10)
    assert lines["Secrets Manager secrets"].usd == pytest.approx(1.20)
    assert lines["CloudWatch alarms"].usd == pytest.approx(0.30)
    assert lines["CloudWatch dashboards"].usd == pytest.approx(3.00)
    assert lines["KMS keys"].usd == pytest.approx(1.00)
    assert lines["SQS idle polling (est.)"].quantity == 0  # no event-source mapping in this template
    per_run = 1.0 * 0.00001 + 0.20 / 1e6 + 5.00 / 1e6  # GB-s, the request, its trace
    assert lines["hourly consolidation runs"].usd == pytest.approx(730 * per_run)


def test_emf_lines_are_counted_as_metric_values_and_series() -> None:
    stage = ["agent"]
    capture = cost.LogCapture(lambda: stage[0])
    emf = {
        "_aws": {
            "Timestamp": 0,
            "CloudWatchMetrics": [
                {
                    "Namespace": "Sigil",
                    "Dimensions": [["service"]],
                    "Metrics": [{"Name": "TurnDuration", "Unit": "Milliseconds"}, {"Name": "ToolCalls"}],
                }
            ],
        },
        "service": "sigil",
        "TurnDuration": [12.5, 40.0],
        "ToolCalls": 1,
    }
    line, info = json.dumps(emf), '{"level": "INFO", "message": "turn done"}'
    capture.write(f"{line}\n{info}\n")
    capture.write("partial")  # not a line until its newline comes
    assert capture.metric_values["agent"] == 3
    assert capture.series["agent"] == {"Sigil/TurnDuration[service=sigil]", "Sigil/ToolCalls[service=sigil]"}
    assert capture.bytes["agent"] == len(line) + 1 + len(info) + 1
    stage[0] = None  # written between invocations: not a function's log
    capture.write(" line\n")
    assert sum(capture.bytes.values()) == len(line) + 1 + len(info) + 1


def test_sqs_and_eventbridge_payload_sizes() -> None:
    attributes = {"kind": {"DataType": "String", "StringValue": "turn"}}
    sent = {"MessageBody": "é" * 10, "MessageAttributes": attributes}
    assert cost._sqs_payload("SendMessage", sent, {}) == 20 + 4 + 6 + 4
    received = {"Messages": [{"Body": "x" * 100}, {"Body": "y" * 50}]}
    assert cost._sqs_payload("ReceiveMessage", {}, received) == 150
    assert cost._sqs_payload("DeleteMessageBatch", {"Entries": [{}]}, {}) == 0
    entry = {"Source": "sigil", "DetailType": "CompactionDue", "Detail": '{"a": 1}'}
    assert cost._event_size(entry) == 5 + 13 + 8


def test_every_price_names_its_source_page_and_the_date_it_was_taken() -> None:
    prices = cost.load_prices()
    assert set(PRICES) <= set(prices)
    for name, price in prices.items():
        assert str(price["source"]).startswith("https://aws.amazon.com/"), name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(price["taken"])), name
        assert price["unit"], name
        values = price["usd"].values() if isinstance(price["usd"], dict) else [price["usd"]]
        assert all(isinstance(v, int | float) and v > 0 for v in values), name


def esm(queue: str, batch: int | None = None) -> dict[str, object]:
    props: dict[str, object] = {"EventSourceArn": {"Fn::GetAtt": [queue, "Arn"]}}
    if batch is not None:
        props["BatchSize"] = batch
    return {"Type": "AWS::Lambda::EventSourceMapping", "Properties": props}


def test_event_sources_know_their_queue_kind_and_batch_size_and_idle_polls_are_priced_by_it() -> None:
    template = {
        "Resources": {
            "Lanes": {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True}},
            "Extraction": {"Type": "AWS::SQS::Queue", "Properties": {"DelaySeconds": 0}},
            "AgentSource": esm("Lanes", 5),
            "ExtractionSource": esm("Extraction"),  # no BatchSize: Lambda's default, 10
        }
    }
    assert cost.event_sources(template) == [
        cost.EventSource("Lanes", fifo=True, batch_size=5),
        cost.EventSource("Extraction", fifo=False, batch_size=10),
    ]
    assert cost.batch_size(template) == 5
    assert cost.batch_size(template, fifo=False) == 10
    assert cost.batch_size({"Resources": {}}) == 10
    lines = by_item(cost.floor_lines(template, PRICES, None, FUNCTIONS))
    # Five 20 s long polls at all times per mapping, each at its own queue's price
    polls = 5 * 3 * 60 * 730
    assert lines["SQS idle polling (est.)"].quantity == 2 * polls
    assert lines["SQS idle polling (est.)"].usd == pytest.approx(polls * (0.50 + 0.40) / 1e6)


def test_the_consolidation_model_is_priced_as_its_budget_charges_it() -> None:
    from shared.budgets import DEFAULT_PRICES

    price = DEFAULT_PRICES[cost.MODEL]
    assert cost.consolidation_price() == (float(price.input_per_mtok), float(price.output_per_mtok))


def test_media_files_are_priced_from_their_calls_storage_and_retention() -> None:
    prices = {
        **PRICES,
        "s3_standard_storage": {"usd": 0.023},
        "s3_put_requests": {"usd": 0.005},
        "s3_get_requests": {"usd": 0.0004},
    }
    lines = by_item(cost.media_lines(prices, files=1000, average_bytes=cost.GB // 1000, retention_days=60))
    # 1,000 files of 1/1000 GB, kept two months: 2 GB-months
    assert lines["S3 media storage, 60 days"].quantity == pytest.approx(2.0)
    assert lines["S3 media storage, 60 days"].usd == pytest.approx(2 * 0.023)
    assert lines["S3 PUT requests"].quantity == 2000  # the bytes and the record
    assert lines["S3 GET requests"].quantity == 2000  # the existence check and one read
    assert lines["S3 PUT requests"].usd == pytest.approx(2 * 0.005)
    assert lines["DynamoDB writes (day's counter)"].usd == pytest.approx(1000 * 0.625 / 1e6)
