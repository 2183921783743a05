"""Log groups with retention, the stage's alarm topic, and the alarms that page it.

Every alarm notifies the topic (an e-mail subscription when `-c alarm_email=...` names one) and its
description ends with a runbook line, "Look first at ...; docs/operations.md#<anchor>", whose
anchor docs/operations.md has (tests/infra/test_observability.py holds both). Custom metrics are
read through `sigil_metric`, from shared.metric_catalogue, so an alarm cannot name a metric the
code does not emit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.nag import acknowledge
from shared.metric_catalogue import (
    BUDGET_DENIED,
    CONSOLIDATION_ERRORS,
    NAMESPACE,
    PROVIDER_ERRORS,
    PROVIDER_FALLBACKS,
    SERVICE,
    SERVICE_DIMENSION,
    TURNS_COMPLETED,
    TURNS_FAILED,
    Metric,
)

RUNBOOK = "docs/operations.md"
# A lane's oldest message older than this is not a turn being worked on (the agent's timeout is
# 10 minutes): its session waits for a redelivery, or nothing consumes the lane.
LANE_STALLED_S = 1200
# Half the extraction queue's retention (1 hour): a per-turn extraction older than this is backed
# up, and one older than the retention is dropped (compaction extracts its messages later).
EXTRACTION_BACKLOG_S = 1800
# Percent of the turns tried in an hour that failed on the model provider or needed the fallback.
PROVIDER_FAILURE_PERCENT = 10
# Turns refused by a workspace budget in an hour: above it, a budget is set too low or a sender
# is spending someone's budget.
BUDGET_DENIALS_PER_HOUR = 20
# Of the domain's volume per node, in percent: below it, writes are near OpenSearch's flood stage.
FREE_STORAGE_PERCENT = 20
# What a stage with `alarms="essential"` keeps (dev: docs/cost.md#the-floors): the alarms that
# mean work is lost or blocked. A lost turn (DeadLetters), failing extractions, an agent that
# fails or a lane nothing consumes, a red or full search domain. The rest (throttles, 5xx of the
# API, provider and budget rates, the other functions' errors) show in the logs and metrics a
# developer watches anyway.
ESSENTIAL_ALARMS = frozenset(
    {
        "DeadLettersAlarm",
        "ExtractionDeadLettersAlarm",
        "AgentErrors",
        "LaneStalled",
        "SearchClusterRed",
        "SearchFreeStorage",
    }
)


def sigil_metric(
    metric: Metric,
    *,
    statistic: str = cloudwatch.Stats.SUM,
    period: Duration | None = None,
    label: str | None = None,
) -> cloudwatch.Metric:
    """One of the catalogue's metrics as the functions publish it (namespace and service)."""
    if metric.dimensions != (SERVICE_DIMENSION,):
        raise ValueError(f"{metric.name} is per workspace: read it with a SEARCH expression")
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=metric.name,
        dimensions_map={SERVICE_DIMENSION: SERVICE},
        statistic=statistic,
        period=period or Duration.minutes(5),
        label=label,
    )


def _any_message(queue: sqs.IQueue) -> cloudwatch.IMetric:
    """The queue's visible messages, the most in 5 minutes: above 0 is someone's to look at."""
    return queue.metric_approximate_number_of_messages_visible(
        period=Duration.minutes(5), statistic=cloudwatch.Stats.MAXIMUM
    )


def runbook(look_first: str, anchor: str) -> str:
    return f"Look first at {look_first}; {RUNBOOK}#{anchor}"


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        alarm_email: str | None = None,
        essential_only: bool = False,
        topic_key: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self._retention = retention
        self._removal_policy = removal_policy
        # A stage that keeps only the alarms of ESSENTIAL_ALARMS (infra.config.StageConfig.alarms).
        self._essential_only = essential_only
        key: kms.Key | None = None
        if topic_key:
            # A key of our own: CloudWatch cannot publish to a topic under the AWS-managed aws/sns
            # key, whose policy cannot grant it.
            key = kms.Key(
                self,
                "AlarmTopicKey",
                description="Encrypts the Sigil alarm topic",
                enable_key_rotation=True,
                removal_policy=removal_policy,
            )
            key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        self.topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True)
        if key is None:
            acknowledge(
                self.topic,
                "AwsSolutions-SNS2",
                "A dev stage's alarm topic carries alarm names and states, never a message or a "
                "secret; a customer managed key would add a dollar a month to a thirty-dollar floor.",
            )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self.alarms: list[cloudwatch.Alarm] = []

    def log_group(self, construct_id: str) -> logs.LogGroup:
        """A log group owned by the stack, so that retention is set before anything writes to it."""
        return logs.LogGroup(
            self,
            construct_id,
            retention=self._retention,
            removal_policy=self._removal_policy,
        )

    def alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        what: str,
        look_first: str,
        anchor: str,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods: int = 1,
    ) -> cloudwatch.Alarm | None:
        """An alarm that notifies the topic, described by what it means and its runbook line;
        None when the stage keeps only the essential alarms and this is not one."""
        if self._essential_only and construct_id not in ESSENTIAL_ALARMS:
            return None
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=f"{what} {runbook(look_first, anchor)}",
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            # Sparse by nature: a function with no errors, an idle queue, a count never emitted
            # publish nothing, which is the good case.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)
        return alarm

    def alarm_on_dead_letters(self, dead_letters: sqs.IQueue) -> cloudwatch.Alarm | None:
        """Any message in the DLQ is a turn that failed five times: someone has to look at it."""
        return self.alarm(
            "DeadLettersAlarm",
            _any_message(dead_letters),
            threshold=0,
            what="Turns reached the dead-letter queue after 5 failed attempts: inspect them, fix the "
            "cause, then redrive them to the lane.",
            look_first="sigil dlq list and the agent's ERROR log lines",
            anchor="dead-letters",
        )

    def alarm_on_extraction_dead_letters(self, dead_letters: sqs.IQueue) -> cloudwatch.Alarm | None:
        """A TurnCommitted whose extraction failed three times: compaction extracts those messages
        later (the watermark did not move), but the cause wants fixing."""
        return self.alarm(
            "ExtractionDeadLettersAlarm",
            _any_message(dead_letters),
            threshold=0,
            what="Per-turn extractions failed 3 times and reached the extraction dead-letter queue: "
            "no fact is lost (compaction extracts the messages), but every extraction may be failing.",
            look_first="the consolidate function's 'turn extraction' ERROR lines",
            anchor="extraction-dead-letters",
        )

    def alarm_on_extraction_backlog(self, extraction: sqs.IQueue) -> cloudwatch.Alarm | None:
        """Per-turn extractions waiting longer than the consolidate function keeps up with: past the
        queue's retention SQS drops them, and their facts wait for compaction."""
        return self.alarm(
            "ExtractionBacklogAlarm",
            extraction.metric_approximate_age_of_oldest_message(
                period=Duration.minutes(5), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=EXTRACTION_BACKLOG_S,
            what=f"A per-turn extraction has waited more than {EXTRACTION_BACKLOG_S // 60} minutes: "
            "the consolidate function does not keep up, and what waits an hour is dropped (its facts "
            "arrive with the session's next compaction).",
            look_first="the consolidate function's Throttles, Duration and ERROR lines",
            anchor="extraction-backlog",
        )

    def alarm_on_functions(self, functions: Mapping[str, lambda_.IFunction]) -> None:
        """Errors and throttles of each function, by its name ("Webhook", "Agent", ...)."""
        for name, function in functions.items():
            self.alarm(
                f"{name}Errors",
                function.metric_errors(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
                threshold=0,
                what=f"The {name} function failed invocations (uncaught errors or timeouts).",
                look_first=f"the {name} function's log group, ERROR lines",
                anchor="function-errors",
            )
            self.alarm(
                f"{name}Throttles",
                function.metric_throttles(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
                threshold=0,
                what=f"Lambda throttled the {name} function: its reserved concurrency is used up.",
                look_first=f"the {name} function's ConcurrentExecutions and the stage's caps",
                anchor="function-throttles",
            )

    def alarm_on_api(self, api: apigwv2.IHttpApi) -> None:
        self.alarm(
            "ApiServerErrors",
            api.metric_server_error(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            threshold=0,
            what="The HTTP API answered 5xx: the webhook failed or refused a request for our fault.",
            look_first="the API access log's 5xx lines by routeKey, then the webhook's log",
            anchor="api-5xx",
        )

    def alarm_on_lane(self, queues: Sequence[sqs.IQueue]) -> None:
        """The oldest turn of any lane queue (the oldest of them all when the lanes are sharded)."""
        ages = [
            q.metric_approximate_age_of_oldest_message(
                period=Duration.minutes(5), statistic=cloudwatch.Stats.MAXIMUM
            )
            for q in queues
        ]
        oldest: cloudwatch.IMetric = (
            ages[0]
            if len(ages) == 1
            else cloudwatch.MathExpression(
                expression=f"MAX([{', '.join(f'q{n}' for n in range(len(ages)))}])",
                using_metrics={f"q{n}": age for n, age in enumerate(ages)},
                period=Duration.minutes(5),
                label="Oldest turn of any lane queue",
            )
        )
        self.alarm(
            "LaneStalled",
            oldest,
            threshold=LANE_STALLED_S,
            what=f"A lane's oldest turn has waited more than {LANE_STALLED_S // 60} minutes: a "
            "session waits for a redelivery after a failure, or nothing consumes the lane.",
            look_first="the agent's Errors and Throttles and its ERROR log lines",
            anchor="lane-stalled",
            evaluation_periods=2,
        )

    def alarm_on_turns(self) -> None:
        """The agent's and the consolidator's own counts: the provider, budgets, consolidation."""
        hour = Duration.hours(1)
        rate = cloudwatch.MathExpression(
            # One turn of slack in the denominator: a single failure at night is not 100 %.
            expression="100 * (FILL(errors, 0) + FILL(fallbacks, 0)) / (FILL(done, 0) + FILL(failed, 0) + 1)",
            using_metrics={
                "errors": sigil_metric(PROVIDER_ERRORS, period=hour),
                "fallbacks": sigil_metric(PROVIDER_FALLBACKS, period=hour),
                "done": sigil_metric(TURNS_COMPLETED, period=hour),
                "failed": sigil_metric(TURNS_FAILED, period=hour),
            },
            period=hour,
            label="Provider failures and fallbacks, % of turns",
        )
        self.alarm(
            "ProviderFailureRate",
            rate,
            threshold=PROVIDER_FAILURE_PERCENT,
            what=f"More than {PROVIDER_FAILURE_PERCENT} % of the hour's turns failed on the model "
            "provider or needed the fallback model.",
            look_first="the agent's 'model call failed' warnings and the provider's status page",
            anchor="provider-failures",
        )
        self.alarm(
            "BudgetDenials",
            sigil_metric(BUDGET_DENIED, period=hour),
            threshold=BUDGET_DENIALS_PER_HOUR,
            what=f"More than {BUDGET_DENIALS_PER_HOUR} turns in an hour were refused by a workspace budget.",
            look_first="the dashboard's cost per workspace, then the turns audited 'budget_denied'",
            anchor="budget-denials",
        )
        self.alarm(
            "ConsolidationFailures",
            sigil_metric(CONSOLIDATION_ERRORS, period=hour),
            threshold=0,
            what="Consolidation failed a session or a workspace (the hourly run carries on with the others).",
            look_first="the consolidate function's ERROR lines ('... compaction failed', 'maintenance "
            "failed', 'workspace consolidation failed')",
            anchor="consolidation-failures",
        )

    def alarm_on_search(self, domain: opensearch.IDomain, *, data_nodes: int, volume_gib: int) -> None:
        minute = Duration.minutes(1)
        self.alarm(
            "SearchClusterRed",
            domain.metric_cluster_status_red(period=minute, statistic=cloudwatch.Stats.MAXIMUM),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            what="The OpenSearch cluster is red: a primary shard is unassigned, so memory search "
            "falls back to recent messages and indexing fails.",
            look_first="the domain's Cluster health page and its SearchAppLogs",
            anchor="search-red",
        )
        if data_nodes > 1:
            # One data node cannot hold a replica: every index there is yellow by design.
            self.alarm(
                "SearchClusterYellow",
                domain.metric_cluster_status_yellow(period=minute, statistic=cloudwatch.Stats.MAXIMUM),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=15,
                what="The OpenSearch cluster has been yellow for 15 minutes: a replica is "
                "unassigned, so losing one more node loses data.",
                look_first="the domain's Cluster health page (nodes and shards)",
                anchor="search-yellow",
            )
        free_mb = volume_gib * 1024 * FREE_STORAGE_PERCENT // 100
        self.alarm(
            "SearchFreeStorage",
            domain.metric_free_storage_space(period=Duration.minutes(5), statistic=cloudwatch.Stats.MINIMUM),
            threshold=free_mb,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            what=f"A search node has less than {FREE_STORAGE_PERCENT} % ({free_mb} MiB) of its volume "
            "free; OpenSearch blocks writes near the flood stage.",
            look_first="the dashboard's FreeStorageSpace and the maintenance purge counts",
            anchor="search-storage",
        )
