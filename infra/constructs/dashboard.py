"""The stage's CloudWatch dashboard: what the webhook, the lanes, the turns, the model, memory and
consolidation are doing, read from the metrics the functions emit (shared.metric_catalogue) and
from the AWS services' own.

Every catalogue metric is on it and nothing else of ours (tests/infra/test_observability.py). The
per-workspace ones are read with SEARCH expressions, so a new workspace shows up without a deploy.
Per channel, the API's own metrics have no route dimension (that takes detailed metrics, billed per
route): the access log has the route key, status and integration latency of each request, and a
Logs Insights widget counts them and takes the latency's percentiles per route and status.
docs/operations.md walks through the widgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.observability import sigil_metric
from shared import metric_catalogue as c
from shared.metric_catalogue import NAMESPACE, WORKSPACE_DIMENSION, Metric

FIVE_MINUTES = Duration.minutes(5)
HOUR = Duration.hours(1)
WIDTH = 8  # three graphs a row (the dashboard grid is 24 wide)


def _sums(*metrics: Metric, period: Duration = FIVE_MINUTES) -> list[cloudwatch.IMetric]:
    return [sigil_metric(m, period=period) for m in metrics]


def _percentiles(metric: Metric) -> list[cloudwatch.IMetric]:
    return [
        sigil_metric(metric, statistic="p50", label=f"{metric.name} p50"),
        sigil_metric(metric, statistic="p95", label=f"{metric.name} p95"),
    ]


def per_workspace(metric: Metric) -> cloudwatch.MathExpression:
    """One line per workspace, summed per hour."""
    if WORKSPACE_DIMENSION not in metric.dimensions:
        raise ValueError(f"{metric.name} has no workspace dimension")
    dims = ",".join((NAMESPACE, *metric.dimensions))
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{dims}}} MetricName=\"{metric.name}\"', 'Sum', 3600)",
        using_metrics={},
        period=HOUR,
        label=metric.name,
    )


def _graph(
    title: str, left: Sequence[cloudwatch.IMetric], *, stacked: bool = False, width: int = WIDTH
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=list(left), stacked=stacked, width=width, height=6)


class Dashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: str,
        api: apigwv2.IHttpApi,
        access_logs: logs.ILogGroup,
        functions: Mapping[str, lambda_.IFunction],
        turns: sqs.IQueue,
        dead_letters: sqs.IQueue,
        extraction_dead_letters: sqs.IQueue,
        domain: opensearch.IDomain,
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"sigil-{stage}")
        add = self.dashboard.add_widgets
        add(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=4),
        )
        add(
            cloudwatch.TextWidget(markdown="## Webhook", width=24, height=1),
        )
        add(
            _graph(
                "HTTP API requests, 4xx, 5xx",
                [
                    api.metric_count(period=FIVE_MINUTES),
                    api.metric_client_error(period=FIVE_MINUTES),
                    api.metric_server_error(period=FIVE_MINUTES),
                ],
            ),
            _graph(
                "HTTP API latency (ms)",
                [
                    api.metric_latency(period=FIVE_MINUTES, statistic="p50", label="Latency p50"),
                    api.metric_latency(period=FIVE_MINUTES, statistic="p95", label="Latency p95"),
                    api.metric_integration_latency(
                        period=FIVE_MINUTES, statistic="p95", label="IntegrationLatency p95"
                    ),
                ],
            ),
            _graph(
                "What the webhook answered",
                _sums(
                    c.MESSAGES_QUEUED,
                    c.MESSAGES_DUPLICATE,
                    c.HANDSHAKES,
                    c.EVENTS_IGNORED,
                    c.REQUESTS_REFUSED,
                ),
                stacked=True,
            ),
        )
        add(
            cloudwatch.LogQueryWidget(
                title="Requests and latency (ms) per channel (route) and status, from the API access log",
                log_group_names=[access_logs.log_group_name],
                query_lines=[
                    "fields routeKey, status, integrationLatency",
                    "stats count(*) as requests, pct(integrationLatency, 50) as p50_ms, "
                    "pct(integrationLatency, 95) as p95_ms by routeKey, status",
                    "sort routeKey asc, status asc",
                ],
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=24,
                height=6,
            ),
        )
        add(cloudwatch.TextWidget(markdown="## Lanes", width=24, height=1))
        add(
            _graph(
                "Lane depth",
                [
                    turns.metric_approximate_number_of_messages_visible(
                        period=FIVE_MINUTES, statistic="Maximum", label="waiting"
                    ),
                    turns.metric_approximate_number_of_messages_not_visible(
                        period=FIVE_MINUTES, statistic="Maximum", label="in flight"
                    ),
                ],
            ),
            _graph(
                "Age of the oldest turn (s)",
                [turns.metric_approximate_age_of_oldest_message(period=FIVE_MINUTES, statistic="Maximum")],
            ),
            _graph(
                "Dead letters",
                [
                    dead_letters.metric_approximate_number_of_messages_visible(
                        period=FIVE_MINUTES, statistic="Maximum", label="turns in the dead-letter queue"
                    ),
                    extraction_dead_letters.metric_approximate_number_of_messages_visible(
                        period=FIVE_MINUTES, statistic="Maximum", label="per-turn extractions dead-lettered"
                    ),
                    *_sums(c.TURNS_GIVEN_UP, c.APOLOGIES_UNDELIVERED),
                ],
            ),
        )
        add(cloudwatch.TextWidget(markdown="## Turns", width=24, height=1))
        add(
            _graph("Turns per outcome", _sums(*c.OUTCOMES.values()), stacked=True),
            _graph("Turn duration (ms)", _percentiles(c.TURN_DURATION)),
            _graph(
                "Lane records",
                _sums(
                    c.TURNS_COMPLETED,
                    c.TURNS_FAILED,
                    c.TURNS_NOT_STARTED,
                    c.TURNS_COALESCED,
                    c.TOOL_CALLS,
                ),
            ),
        )
        add(
            _graph("Tokens (all workspaces, per hour)", _sums(c.TOKENS_IN, c.TOKENS_OUT, period=HOUR)),
            _graph(
                "Tokens per workspace (per hour)",
                [per_workspace(c.WORKSPACE_TOKENS_IN), per_workspace(c.WORKSPACE_TOKENS_OUT)],
            ),
            _graph(
                "Cost in USD per hour: all, and per workspace",
                [*_sums(c.COST_USD, period=HOUR), per_workspace(c.WORKSPACE_COST_USD)],
            ),
        )
        add(
            _graph(
                "Model provider: retries, fallbacks, failed turns",
                _sums(c.PROVIDER_RETRIES, c.PROVIDER_FALLBACKS, c.PROVIDER_ERRORS),
            ),
            _graph(
                "Budget denials",
                _sums(c.BUDGET_DENIED, c.COMPACTION_OVER_BUDGET, period=HOUR),
            ),
            _graph(
                "Memory search fallbacks (hybrid -> BM25 -> recent)",
                _sums(c.SEARCH_FALLBACK_BM25, c.SEARCH_FALLBACK_RECENT),
            ),
        )
        add(cloudwatch.TextWidget(markdown="## Consolidation", width=24, height=1))
        add(
            _graph(
                "Runs (per hour)",
                _sums(
                    c.SCHEDULE_TICKS,
                    c.COMPACTION_REQUESTS,
                    c.MAINTENANCE_REQUESTS,
                    c.CONSOLIDATION_PARTIAL,
                    c.COMPACTION_BUSY,
                    c.CONSOLIDATION_ERRORS,
                    c.MAINTENANCE_COMPLETE,
                    period=HOUR,
                ),
            ),
            _graph(
                "Summaries and facts (per hour)",
                _sums(
                    c.SUMMARIES_WRITTEN,
                    c.FACTS_EXTRACTED,
                    c.FACTS_MERGED,
                    c.FACTS_DROPPED,
                    c.CONSOLIDATION_TOKENS_IN,
                    c.CONSOLIDATION_TOKENS_OUT,
                    period=HOUR,
                ),
            ),
            _graph(
                "Durations (ms)",
                [
                    sigil_metric(m, statistic="Maximum", period=HOUR)
                    for m in (c.COMPACTION_DURATION, c.CONSOLIDATION_RUN_DURATION, c.MAINTENANCE_DURATION)
                ],
            ),
        )
        add(
            _graph(
                "Per-turn extraction (per hour)",
                _sums(
                    c.TURN_EXTRACTION_REQUESTS,
                    c.TURN_EXTRACTIONS,
                    c.TURN_EXTRACTION_FACTS,
                    c.TURN_EXTRACTION_SUPERSEDED,
                    c.TURN_EXTRACTION_BUSY,
                    c.TURN_EXTRACTION_OVER_BUDGET,
                    period=HOUR,
                ),
            ),
        )
        add(
            _graph(
                "Maintenance: merged, pruned, promoted (per hour)",
                _sums(
                    c.MAINTENANCE_SCORED,
                    c.MAINTENANCE_PROMOTED,
                    c.MAINTENANCE_MERGED,
                    c.MAINTENANCE_PRUNED,
                    c.MAINTENANCE_PURGED,
                    period=HOUR,
                ),
            ),
            _graph(
                "Backfills (per hour)",
                _sums(
                    c.MAINTENANCE_BACKFILLED,
                    c.MAINTENANCE_MESSAGES_BACKFILLED,
                    c.MAINTENANCE_SUMMARIES_BACKFILLED,
                    c.MAINTENANCE_SCOPES_BACKFILLED,
                    period=HOUR,
                ),
            ),
        )
        add(cloudwatch.TextWidget(markdown="## OpenSearch and functions", width=24, height=1))
        minute = Duration.minutes(1)
        add(
            _graph(
                "Cluster status",
                [
                    domain.metric_cluster_status_red(period=minute, statistic="Maximum"),
                    domain.metric_cluster_status_yellow(period=minute, statistic="Maximum"),
                ],
            ),
            _graph(
                "Free storage (MiB, least of the nodes)",
                [domain.metric_free_storage_space(period=FIVE_MINUTES, statistic="Minimum")],
            ),
            _graph(
                "Function errors and throttles",
                [
                    metric
                    for name, function in functions.items()
                    for metric in (
                        function.metric_errors(period=FIVE_MINUTES, label=f"{name} errors"),
                        function.metric_throttles(period=FIVE_MINUTES, label=f"{name} throttles"),
                    )
                ],
            ),
        )
