"""Things done later (docs/schedules.md): EventBridge Scheduler's schedule group and the role its
schedules send as.

Each schedule the agent makes (shared.adapters.aws.schedules) is one schedule in this group whose
target is its session's lane queue: its role may send to the lane queues and nothing else, and only the
Scheduler service of this account may assume it. The agent may create and delete schedules in
this group only, and pass this role only.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.nag import acknowledge

SCHEDULES_REASON = (
    "Each reminder or scheduled task is its own schedule, named when a user sets it; the grant "
    "names the schedules of this stack's one schedule group and nothing else."
)


class Schedules(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, name_prefix: str, lanes: list[sqs.Queue]
    ) -> None:
        super().__init__(scope, construct_id)
        self.group_name = f"{name_prefix}-schedules"
        self.group = scheduler.ScheduleGroup(self, "Group", schedule_group_name=self.group_name)
        stack = Stack.of(self)
        schedules_arn = stack.format_arn(
            service="scheduler", resource="schedule", resource_name=f"{self.group_name}/*"
        )
        self.role = iam.Role(
            self,
            "Role",
            description="EventBridge Scheduler: puts fired schedules on the turns queue",
            # The confused-deputy guard: only schedules of this account, in this group.
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": schedules_arn},
                },
            ),
        )
        # SendMessage alone (grant_send_messages adds GetQueueUrl/GetQueueAttributes, which
        # Scheduler does not call); the queue's SSE is SQS-managed, so no KMS grant. Every lane
        # queue: a schedule targets its session's (docs/scale.md#sharded-lanes).
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[q.queue_arn for q in lanes])
        )

    def grant_manage(self, function: lambda_.Function) -> None:
        """Create and delete schedules in this group, each sending as this group's role."""
        self.group.grant_write_schedules(function)
        self.group.grant_delete_schedules(function)
        self.role.grant_pass_role(function.grant_principal)
        assert function.role is not None  # every SigilFunction has a role of its own
        acknowledge(
            function.role,
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:"
            f"schedule/{self.group_name}/*]",
            SCHEDULES_REASON,
        )
