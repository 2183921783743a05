"""run_python's compiled runtime, compiled once per deploy instead of once per agent environment
(docs/sandbox.md#the-compile-and-its-cache).

Compiling the 26 MB CPython-for-WASI module costs a fresh agent environment tens of seconds, and
the PyPI wasmtime cannot cross-compile for arm64 where the layer is built. So a function of its
own, arm64 with the agent's layer (hence the agent's wasmtime, machine and engine settings),
compiles it after each deploy (on CloudFormation's stack-status event; the deploy does not wait) and puts
the serialized module in this bucket; agent environments load it in a fraction of a second.

A serialized module is native code that the agent runs: the bucket is write-once, and its only
writer is the precompile function. The bucket policy denies every put or delete by any other
principal (the agent included: it may only read) and every put not conditional on the key being
absent (If-None-Match), so an object, once there, is never replaced. The reader also checks each
body against the SHA-256 its pointer names (shared.sandbox.compiled). An agent environment that
finds the bucket empty compiles for itself and asks this function, asynchronously, to fill it; its
reserved concurrency of 1 makes a burst of such requests one compile.
"""

from __future__ import annotations

from aws_cdk import CfnElement, Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.function import SigilFunction
from infra.constructs.nag import acknowledge

PREFIX = "sandbox/"
# Compiling takes ~30 s of one core here; Lambda's CPU grows with memory (2 GB: over one vCPU),
# and Wasmtime compiles functions in parallel.
MEMORY_MB = 2048
TIMEOUT = Duration.minutes(10)


class SandboxCache(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            # Derived data, rebuilt by the next deploy's trigger; kept with the stack's other
            # buckets on delete (CloudFormation cannot delete a non-empty one).
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Only the precompile function writes here, once per key; the objects are compiled "
            "code derived from the layer, rebuilt by any deploy, so access logs would record nothing.",
        )
        self.handler = SigilFunction(
            self,
            "Handler",
            source="sandbox",
            description="Sigil sandbox precompile: compiles run_python's runtime into the cache bucket",
            timeout=TIMEOUT,
            memory_size=MEMORY_MB,
            layer=layer,
            log_group=log_group,
            # One compile at a time: a burst of agents finding the bucket empty waits for it.
            reserved_concurrency=1,
        )
        self.function = self.handler.function
        self.function.add_environment("SIGIL_SANDBOX_CACHE_BUCKET", self.bucket.bucket_name)
        objects = self.bucket.arn_for_objects(f"{PREFIX}*")
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[objects])
        )
        self._grant_list(self.function)
        writer = self.handler.role.role_arn
        # The trust root: nobody but the precompile function writes or deletes, and it only
        # creates (a put must carry If-None-Match, so nothing once written is replaced).
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyThePrecompileFunctionWrites",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"],
                resources=[self.bucket.arn_for_objects("*")],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": writer}},
            )
        )
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="WriteOnce",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject"],
                resources=[self.bucket.arn_for_objects("*")],
                conditions={"Null": {"s3:if-none-match": "true"}},
            )
        )
        self._acknowledge_prefix(self.handler.role)
        # After each deploy: CloudFormation's own "stack status change" event on the default
        # bus, CREATE_COMPLETE or UPDATE_COMPLETE of this stack, invokes the function
        # (asynchronously: the deploy does not wait). A key already in the bucket costs one
        # GetObject; a new layer (runtime, wasmtime) compiles. Not aws_cdk.triggers.Trigger: its
        # provider's role carries the AWSLambdaBasicExecutionRole managed policy, which this
        # stack's roles never do (tests/infra: test_roles_have_no_managed_policies).
        self.after_deploy = events.Rule(
            self,
            "AfterDeploy",
            description="Sigil: compile run_python's runtime into its cache after each deploy",
            event_pattern=events.EventPattern(
                source=["aws.cloudformation"],
                detail_type=["CloudFormation Stack Status Change"],
                detail={
                    "stack-id": [Stack.of(self).stack_id],
                    "status-details": {"status": ["CREATE_COMPLETE", "UPDATE_COMPLETE"]},
                },
            ),
            targets=[targets.LambdaFunction(self.function, retry_attempts=2)],
        )

    def _acknowledge_prefix(self, role: iam.IRole) -> None:
        cfn = self.bucket.node.default_child
        assert isinstance(cfn, CfnElement)
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::<{Stack.of(self).get_logical_id(cfn)}.Arn>/sandbox/*]",
            "Compiled modules are objects named sandbox/<key>/<sha256>.cwasm and sandbox/<key>/sha256, "
            "keyed by runtime, wasmtime version and machine: the grant names this bucket's prefix.",
        )

    def _grant_list(self, function: lambda_.Function) -> None:
        # Without ListBucket, S3 answers a missing key with 403, not 404: the reader must tell
        # "not compiled yet" from "refused" (shared.adapters.aws.sandbox_cache).
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{PREFIX}*"]}},
            )
        )

    def grant_read(self, function: lambda_.Function) -> None:
        """What an agent environment does with the cache: read it, and ask for a compile when it
        is empty (shared.cloud.use_sandbox_cache). Never write."""
        objects = self.bucket.arn_for_objects(f"{PREFIX}*")
        function.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        self._grant_list(function)
        # The unqualified function only (grant_invoke would add its every version, `:*`).
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
        )
        function.add_environment("SIGIL_SANDBOX_CACHE_BUCKET", self.bucket.bucket_name)
        function.add_environment("SIGIL_SANDBOX_PRECOMPILE_FUNCTION", self.function.function_name)
        assert function.role is not None
        self._acknowledge_prefix(function.role)
