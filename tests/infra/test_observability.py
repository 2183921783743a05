"""The alarms, their topic and the dashboard, against the metric catalogue and docs/operations.md.

The metric names the code emits are shared.metric_catalogue's (tests/unit/test_metric_catalogue.py
holds the code to it); here the synthesised dashboard and alarms are held to the same list, both
ways, so a widget or an alarm cannot read a metric nothing emits and no metric goes undrawn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Match

from infra.config import ROOT, STAGES, read_context
from infra.constructs.ingress import ACCESS_LOG_FORMAT
from infra.constructs.observability import ESSENTIAL_ALARMS
from shared.metric_catalogue import CATALOGUE, NAMESPACE, SERVICE, SERVICE_DIMENSION
from tests.infra.helpers import Synth, logical_id, synthesize

pytestmark = pytest.mark.slow

RUNBOOK_LINE = re.compile(r"Look first at [^;]+; docs/operations\.md#([a-z0-9-]+)$")
SECURE = "aws:SecureTransport"
SEARCH_METRIC = re.compile(r"SEARCH\('\{([^}]*)\}\s*MetricName=\"([^\"]+)\"")


def _alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in synth.resources("AWS::CloudWatch::Alarm").items()}


def _topic(synth: Synth) -> str:
    return logical_id(synth.stack.node.find_child("Observability").node.find_child("AlarmTopic"))


def _anchors() -> set[str]:
    """GitHub's heading anchors in docs/operations.md."""
    text = (ROOT / "docs" / "operations.md").read_text()
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def _dashboard_body(synth: Synth) -> dict[str, Any]:
    """The dashboard's JSON, its CloudFormation references replaced by a placeholder."""
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return json.loads("".join(p if isinstance(p, str) else "REF" for p in parts))


def _custom_metrics_in_dashboard(body: dict[str, Any]) -> set[tuple[str, tuple[str, ...]]]:
    """(metric name, dimension names) of every metric of our namespace the widgets read."""
    found: set[tuple[str, tuple[str, ...]]] = set()
    for widget in body["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            if isinstance(row[-1], dict) and "expression" in row[-1]:
                for dims, name in SEARCH_METRIC.findall(row[-1]["expression"]):
                    namespace, *dimensions = [d.strip() for d in dims.split(",")]
                    if namespace == NAMESPACE:
                        found.add((name, tuple(sorted(dimensions))))
                continue
            fields = [f for f in row if not isinstance(f, dict)]
            if fields and fields[0] == NAMESPACE:
                found.add((fields[1], tuple(sorted(fields[2::2]))))
    return found


def _custom_metrics_in_alarm(alarm: dict[str, Any]) -> set[tuple[str, tuple[str, ...]]]:
    stats = (
        [alarm] if "MetricName" in alarm else [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    )
    found = set()
    for stat in stats:
        metric = stat.get("Metric", stat)
        if metric.get("Namespace") == NAMESPACE:
            dims = tuple(sorted(d["Name"] for d in metric.get("Dimensions", [])))
            found.add((metric["MetricName"], dims))
    return found


def _catalogued() -> set[tuple[str, tuple[str, ...]]]:
    return {(m.name, tuple(sorted(m.dimensions))) for m in CATALOGUE.values()}


# ---------------------------------------------------------------- alarms


def test_every_alarm_notifies_the_stages_topic(each_stage: Synth) -> None:
    alarms = _alarms(each_stage)

    # dev keeps the essential alarms alone (test_dev_keeps_only_the_alarms_...).
    assert len(alarms) >= (14 if STAGES[each_stage.stage].alarms == "all" else len(ESSENTIAL_ALARMS))
    assert {k: a.get("AlarmActions") for k, a in alarms.items()} == {
        k: [{"Ref": _topic(each_stage)}] for k in alarms
    }


def test_every_alarm_says_what_to_look_at_first_and_links_an_existing_runbook_section(
    each_stage: Synth,
) -> None:
    anchors = _anchors()
    links = {k: RUNBOOK_LINE.search(a["AlarmDescription"]) for k, a in _alarms(each_stage).items()}

    assert [k for k, m in links.items() if m is None] == []
    assert {m.group(1) for m in links.values() if m} <= anchors


def test_the_alarms_cover_functions_api_lane_dead_letters_turns_consolidation_and_search(prod: Synth) -> None:
    stack = prod.stack
    functions = (
        stack.ingress.function,
        stack.agent.function,
        stack.consolidation.function,
        stack.websocket.function,
    )
    by_metric: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for alarm in _alarms(prod).values():
        if "MetricName" in alarm:
            by_metric.setdefault((alarm["Namespace"], alarm["MetricName"]), []).append(alarm)

    for name in ("Errors", "Throttles"):
        watched = {a["Dimensions"][0]["Value"]["Ref"] for a in by_metric[("AWS/Lambda", name)]}
        assert watched == {logical_id(f) for f in functions}
    assert ("AWS/ApiGateway", "5xx") in by_metric
    ages = {
        a["Dimensions"][0]["Value"]["Fn::GetAtt"][0]: a
        for a in by_metric[("AWS/SQS", "ApproximateAgeOfOldestMessage")]
    }
    # The lane's oldest turn, and the per-turn extractions' backlog: half the queue's retention,
    # so the alarm goes off before SQS drops one
    assert set(ages) == {logical_id(stack.lanes.turns), logical_id(stack.consolidation.extraction)}
    backlog = ages[logical_id(stack.consolidation.extraction)]
    assert (backlog["Statistic"], backlog["Threshold"], backlog["ComparisonOperator"]) == (
        "Maximum",
        1800,
        "GreaterThanThreshold",
    )
    extraction = prod.template.find_resources("AWS::SQS::Queue")[logical_id(stack.consolidation.extraction)]
    goes_off_after = backlog["Threshold"] + backlog["EvaluationPeriods"] * backlog["Period"]
    assert goes_off_after < extraction["Properties"]["MessageRetentionPeriod"]
    dead = by_metric[("AWS/SQS", "ApproximateNumberOfMessagesVisible")]
    # Any message in either dead-letter queue: the turns' and the per-turn extractions'
    assert {a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in dead} == {
        logical_id(stack.lanes.dead_letters),
        logical_id(stack.consolidation.extraction_dead_letters),
    }
    assert {(a["Threshold"], a["ComparisonOperator"]) for a in dead} == {(0, "GreaterThanThreshold")}
    for name in ("ClusterStatus.red", "ClusterStatus.yellow", "FreeStorageSpace"):
        assert ("AWS/ES", name) in by_metric
    assert {(NAMESPACE, "Outcome_budget_denied"), (NAMESPACE, "ConsolidationErrors")} <= set(by_metric)
    rates = [a for a in _alarms(prod).values() if "Metrics" in a]
    assert [sorted(n for n, _ in _custom_metrics_in_alarm(a)) for a in rates] == [
        ["ProviderErrors", "ProviderFallbacks", "TurnsCompleted", "TurnsFailed"]
    ]


def test_dev_keeps_only_the_alarms_that_mean_work_is_lost_or_blocked(dev: Synth, team: Synth) -> None:
    def names(synth: Synth) -> set[str]:
        observability = synth.stack.node.find_child("Observability")
        return {a.node.id for a in observability.alarms}

    assert names(dev) == ESSENTIAL_ALARMS
    assert len(_alarms(dev)) == len(ESSENTIAL_ALARMS)
    # team keeps every alarm, prod's included: its data nodes can go yellow.
    assert names(team) > ESSENTIAL_ALARMS
    assert "SearchClusterYellow" in names(team)


def test_a_one_node_domain_has_no_yellow_alarm_it_could_never_clear(dev: Synth) -> None:
    # One data node cannot hold a replica: its indexes are yellow for good.
    names = {a.get("MetricName") for a in _alarms(dev).values()}

    assert "ClusterStatus.red" in names
    assert "ClusterStatus.yellow" not in names


def test_every_metric_an_alarm_reads_is_one_the_code_emits(each_stage: Synth) -> None:
    read = set().union(*(_custom_metrics_in_alarm(a) for a in _alarms(each_stage).values()))

    # dev's essential alarms read AWS's metrics alone (queues, functions, the domain).
    assert read or STAGES[each_stage.stage].alarms == "essential"
    assert read - _catalogued() == set()


# ---------------------------------------------------------------- the topic


def test_the_topic_is_encrypted_with_a_key_cloudwatch_may_use_and_refuses_plain_http(prod: Synth) -> None:
    (topic,) = prod.resources("AWS::SNS::Topic").values()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = prod.raw["Resources"][key_id]["Properties"]

    assert key["EnableKeyRotation"] is True
    assert any(
        s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(s["Action"])
        for s in key["KeyPolicy"]["Statement"]
    )
    _refuses_plain_http(prod)


def test_the_dev_topic_has_no_key_of_its_own_and_still_refuses_plain_http(dev: Synth) -> None:
    """A customer managed key is a dollar of dev's thirty-dollar floor; the topic carries alarm
    names and states only (docs/cost.md#the-floors)."""
    (topic,) = dev.resources("AWS::SNS::Topic").values()

    assert "KmsMasterKeyId" not in topic.get("Properties", {})
    assert dev.resources("AWS::KMS::Key") == {}
    _refuses_plain_http(dev)


def _refuses_plain_http(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "Topics": [{"Ref": _topic(synth)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            },
        },
    )


def test_no_one_is_subscribed_unless_the_context_names_an_address(each_stage: Synth) -> None:
    assert each_stage.resources("AWS::SNS::Subscription") == {}


def test_alarm_email_subscribes_that_address_to_the_topic(tmp_path: Path, stand_in_layer: Path) -> None:
    synth = synthesize("dev", tmp_path, stand_in_layer, alarm_email="oncall@example.com")

    synth.template.has_resource_properties(
        "AWS::SNS::Subscription",
        {"Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": {"Ref": _topic(synth)}},
    )


@pytest.mark.parametrize("value", ["not-an-address", "a@example.com,b@example.com"])
def test_an_alarm_email_that_is_not_one_address_is_refused(value: str) -> None:
    app = App(context={"alarmEmail": value})

    with pytest.raises(ValueError, match="alarm_email must be one e-mail address"):
        read_context(app.node)


def test_alarm_email_is_read_under_either_spelling() -> None:
    for key in ("alarm_email", "alarmEmail"):
        assert read_context(App(context={key: "ops@example.com"}).node).alarm_email == "ops@example.com"
    assert read_context(App().node).alarm_email is None


# ---------------------------------------------------------------- the dashboard


def test_one_dashboard_per_stage_named_after_it_but_none_in_dev(each_stage: Synth) -> None:
    dashboards = each_stage.resources("AWS::CloudWatch::Dashboard").values()

    if not STAGES[each_stage.stage].dashboard:
        assert not dashboards
        return
    (dashboard,) = dashboards
    assert dashboard["Properties"]["DashboardName"] == f"sigil-{each_stage.stage}"


@pytest.mark.parametrize("stage", ["team", "prod"])
def test_every_metric_the_code_emits_is_on_the_dashboard_and_nothing_else_of_ours(
    stage: str, synth: Callable[[str], Synth]
) -> None:
    drawn = _custom_metrics_in_dashboard(_dashboard_body(synth(stage)))

    assert drawn - _catalogued() == set()
    assert _catalogued() - drawn == set()


def test_the_dashboard_reads_our_metrics_under_the_service_dimension_powertools_adds(prod: Synth) -> None:
    body = json.dumps(_dashboard_body(prod))

    assert f'"{NAMESPACE}", "TurnDuration", "{SERVICE_DIMENSION}", "{SERVICE}"' in body
    assert "WorkspaceCostUSD" in body and "SEARCH(" in body


def test_the_dashboard_shows_the_aws_side_too(prod: Synth) -> None:
    body = _dashboard_body(prod)
    rows = [
        row
        for widget in body["widgets"]
        for row in widget.get("properties", {}).get("metrics", [])
        if isinstance(row[0], str)
    ]
    aws = {(row[0], row[1]) for row in rows}
    queries = [w["properties"]["query"] for w in body["widgets"] if w["type"] == "log"]

    assert {
        ("AWS/ApiGateway", "Count"),
        ("AWS/ApiGateway", "4xx"),
        ("AWS/ApiGateway", "5xx"),
        ("AWS/ApiGateway", "Latency"),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/ES", "ClusterStatus.red"),
        ("AWS/ES", "ClusterStatus.yellow"),
        ("AWS/ES", "FreeStorageSpace"),
        ("AWS/Lambda", "Errors"),
        ("AWS/Lambda", "Throttles"),
    } <= aws
    # Per channel: the access log's route key, counted by status, with the latency's percentiles.
    assert len(queries) == 1 and "by routeKey, status" in queries[0]
    assert "pct(integrationLatency, 50)" in queries[0] and "pct(integrationLatency, 95)" in queries[0]
    assert "integrationLatency" in ACCESS_LOG_FORMAT


def test_the_dashboard_counts_both_dead_letter_queues(prod: Synth) -> None:
    stack = prod.stack
    (dashboard,) = prod.resources("AWS::CloudWatch::Dashboard").values()
    # The queues' names are references in the body's Fn::Join, beside the JSON text around them.
    references = [p for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(p, dict)]
    widgets = _dashboard_body(prod)["widgets"]
    (widget,) = [w for w in widgets if w["properties"].get("title") == "Dead letters"]
    visible = [
        r
        for r in widget["properties"]["metrics"]
        if r[:2] == ["AWS/SQS", "ApproximateNumberOfMessagesVisible"]
    ]

    assert len(visible) == 2
    for queue in (stack.lanes.dead_letters, stack.consolidation.extraction_dead_letters):
        assert {"Fn::GetAtt": [logical_id(queue), "QueueName"]} in references
