"""The media bucket: files senders attached (docs/media.md), `media/<ws>/<id>/{bytes,record.json}`.

Written and read by the agent (it fetches attachments in the turn, shared.media.fetch) and by the
webhook (the chat page's uploads, shared.media.upload: presigned POSTs it signs, read back and
recorded), read by the ws function (a `send`'s files checked), and only under `media/`. S3-managed
encryption, public access blocked, TLS enforced by the bucket policy, CORS for the chat page's
POSTs from its origins alone, and a lifecycle rule that expires every object after the stack's
media retention (the file and its record share a prefix, so they go together). Not versioned:
erasing a user's files (`sigil` erasure) must remove them, not keep a noncurrent copy. Kept when
the stack is deleted (CloudFormation can't delete a non-empty bucket), and the lifecycle rule
empties it within the retention; delete it by hand sooner.
"""

from __future__ import annotations

from aws_cdk import CfnElement, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.nag import acknowledge

PREFIX = "media/"
_WEB_REASON = (
    "Media are objects named media/<workspace>/<id>/...; the function serves every web "
    "workspace's chat page, so its grant names the media/ prefix of this one bucket."
)


class Media(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, retention_days: int) -> None:
        super().__init__(scope, construct_id)
        self.retention_days = retention_days
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    prefix=PREFIX,
                    expiration=Duration.days(retention_days),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Only the agent (attachments it fetches) and the webhook (the chat page's uploads) "
            "write here, through their roles; every file expires after the media retention, and "
            "CloudTrail data events can be enabled per stage.",
        )

    def grant_read_write(self, function: lambda_.Function) -> None:
        """Get, put and delete under media/, and ListBucket: what shared.adapters.aws.media does.

        ListBucket has no prefix condition: S3 answers a GetObject of a missing key 404 only to a
        role that may list the bucket (403 otherwise), and each fetch first asks whether the file
        is stored already. The bucket holds nothing but media/."""
        self._grant_objects(
            function,
            ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Media are objects named media/<workspace>/<id>/...; the agent serves every workspace, "
            "so its grant names the media/ prefix of this one bucket.",
        )
        self._grant_listing(function)

    def grant_uploads(self, function: lambda_.Function) -> None:
        """What the chat page's uploads take (shared.media.upload, the webhook): s3:PutObject, so
        the presigned POSTs it signs are allowed, get and delete to read an upload back and record
        it, under media/ only; and ListBucket, so asking for a record or an upload not there
        yet answers 404 (a confirm's first question), not 403."""
        self._grant_objects(function, ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], _WEB_REASON)
        self._grant_listing(function)

    def grant_read(self, function: lambda_.Function) -> None:
        """s3:GetObject under media/ and ListBucket: the ws function reads a file's record to check
        a `send`'s files are the sender's own (shared.ingress.media); an id of no file must answer
        404 (refused as not the sender's), not 403 (an internal error)."""
        self._grant_objects(function, ["s3:GetObject"], _WEB_REASON)
        self._grant_listing(function)

    def _grant_listing(self, function: lambda_.Function) -> None:
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn])
        )

    def _grant_objects(self, function: lambda_.Function, actions: list[str], reason: str) -> None:
        objects = self.bucket.arn_for_objects(f"{PREFIX}*")
        function.add_to_role_policy(iam.PolicyStatement(actions=actions, resources=[objects]))
        assert function.role is not None
        cfn = self.bucket.node.default_child
        assert isinstance(cfn, CfnElement)
        acknowledge(
            function.role,
            f"AwsSolutions-IAM5[Resource::<{Stack.of(self).get_logical_id(cfn)}.Arn>/media/*]",
            reason,
        )

    def admit_uploads_from(self, origins: list[str]) -> None:
        """CORS for the chat page's presigned POSTs: from the page's origins only, POST only."""
        self.bucket.add_cors_rule(
            allowed_methods=[s3.HttpMethods.POST],
            allowed_origins=origins,
            allowed_headers=["*"],
            max_age=3000,
        )
