"""The skills bucket: each workspace's installed skills (docs/skills.md), `skills/<ws>/<name>/...`.

Written by operators with `sigil skill` (their own credentials), read by the agent, whose role may
get objects under `skills/` and list that prefix, nothing else. S3-managed encryption, versioned
(a replaced or removed skill can be recovered; old versions expire after 90 days), public access
blocked, TLS enforced by the bucket policy, and kept when the stack is deleted (skills are the
operators' content, and CloudFormation can't delete a non-empty bucket anyway).
"""

from __future__ import annotations

from aws_cdk import CfnElement, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.nag import acknowledge

PREFIX = "skills/"
NONCURRENT_DAYS = 90


class Skills(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=Duration.days(NONCURRENT_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Only operators write here, with sigil skill and their own credentials; the agent only "
            "reads, and versioning keeps every replaced or removed skill for 90 days.",
        )

    def grant_read(self, function: lambda_.Function) -> None:
        """GetObject under skills/ and ListBucket of that prefix: what shared.adapters.aws.skills reads."""
        objects = self.bucket.arn_for_objects(f"{PREFIX}*")
        function.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{PREFIX}*"]}},
            )
        )
        assert function.role is not None
        cfn = self.bucket.node.default_child
        assert isinstance(cfn, CfnElement)
        acknowledge(
            function.role,
            f"AwsSolutions-IAM5[Resource::<{Stack.of(self).get_logical_id(cfn)}.Arn>/skills/*]",
            "Skills are objects named skills/<workspace>/<skill>/<file>; the agent reads any "
            "workspace's skills, so its grant names the skills/ prefix of this one bucket.",
        )
