"""Log groups with retention for everything that logs, and the alarm on the lanes' dead letters."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self._retention = retention
        self._removal_policy = removal_policy

    def log_group(self, construct_id: str) -> logs.LogGroup:
        """A log group owned by the stack, so that retention is set before anything writes to it."""
        return logs.LogGroup(
            self,
            construct_id,
            retention=self._retention,
            removal_policy=self._removal_policy,
        )

    def alarm_on_dead_letters(self, dead_letters: sqs.IQueue) -> cloudwatch.Alarm:
        """Any message in the DLQ is a turn that failed five times: someone has to look at it."""
        return cloudwatch.Alarm(
            self,
            "DeadLettersAlarm",
            alarm_description="Turns reached the dead-letter queue after 5 failed attempts: "
            "inspect them, fix the cause, then redrive them to the lane.",
            metric=dead_letters.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # SQS stops publishing metrics for a queue that has been empty and idle for hours.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
