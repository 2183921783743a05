"""Memory: the sessions and memory tables (DynamoDB) and the search domain (OpenSearch).

The key schema is the one shared/adapters/aws/dynamodb/ declares in TABLE_SCHEMAS (tests/infra
compares the two). The search domain accepts only SigV4-signed requests from the roles given to
`grant_index_read_write`, over HTTPS with TLS 1.2 or later.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import jsii
from aws_cdk import CfnElement, IStableAnyProducer, Lazy, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchservice as opensearch
from constructs import Construct

from infra.config import SearchSizing, StageConfig
from infra.constructs.nag import acknowledge
from infra.constructs.observability import Observability

TTL_ATTRIBUTE = "ttl"
INDEX_ACTIONS = [
    "es:ESHttpGet",
    "es:ESHttpHead",
    "es:ESHttpDelete",
    "es:ESHttpPost",
    "es:ESHttpPut",
    "es:ESHttpPatch",
]
STRING = dynamodb.AttributeType.STRING
# The sessions table's partition of the channel routes (shared.adapters.aws.dynamodb.routes).
ROUTES_PARTITION = "ROUTES"
# What the consolidate function does in the sessions table (shared/consolidation, through the
# DynamoDB adapters), as (actions, the partitions they may name, IAM StringLike): a session
# `WS#{ws}` read, listed (Query, BatchGetItem) and saved with its rolling summary (a conditional
# PutItem); its leases and checkpoints `WS#{ws}#CONSOLIDATION` read and put, a lease released
# (a conditional DeleteItem: only there); the budget counters' shards `WS#{ws}#BUDGET[#n]` read
# (BatchGetItem) and shard 0 `WS#{ws}#BUDGET` charged (Updates in a TransactWriteItems); the
# delegated tasks `WS#{ws}#TASKS` listed and an overdue one ended by the task sweep (its put, and
# Updates of its pointer and the active counters in a TransactWriteItems). Updates only there.
# No Scan, no BatchWriteItem, no deletion of a session, outbox or ledger item, no routes or
# connections. tests/infra checks the patterns against the adapters' keys.
CONSOLIDATOR_SESSIONS_ACCESS: Final[tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = (
    (("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:BatchGetItem"), ("WS#*",)),
    (("dynamodb:DeleteItem",), ("WS#*#CONSOLIDATION",)),
    (("dynamodb:UpdateItem",), ("WS#*#BUDGET",)),
    # The task sweep (shared.tasks.sweep) ends an overdue task: its pointer and the active
    # counters move in the task's TransactWriteItems (shared.adapters.aws.dynamodb.tasks).
    (("dynamodb:UpdateItem",), ("WS#*#TASKS",)),
)


def outbox_partitions(workspace_id: str) -> str:
    """The web outbox's partition keys of one workspace, as an IAM StringLike pattern.

    shared.adapters.aws.dynamodb.outbox keys a session's replies `WS#{workspace}#OUTBOX#{session}`,
    and the web channel's sessions are `web.{session}` (shared.channels.web.session_id_for);
    tests/infra checks this pattern against the keys those helpers build. Naming the workspace
    (ids hold no "#", "*" or "?") keeps every other partition out, even one whose free-text part
    happens to contain "#OUTBOX#" (a send ledger's turn id).
    """
    return f"WS#{workspace_id}#OUTBOX#web.*"


class Memory(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: StageConfig,
        domain_name: str,
        observability: Observability,
    ) -> None:
        super().__init__(scope, construct_id)
        self.sessions = self._table("Sessions", stage)
        self.memory = self._table("Memory", stage)
        # Tier-3 triples by subject and by object, and the other secondary access paths.
        for index, (pk, sk) in {"GSI1": ("gsi1pk", "gsi1sk"), "GSI2": ("gsi2pk", "gsi2sk")}.items():
            self.memory.add_global_secondary_index(
                index_name=index,
                partition_key=dynamodb.Attribute(name=pk, type=STRING),
                sort_key=dynamodb.Attribute(name=sk, type=STRING),
                projection_type=dynamodb.ProjectionType.ALL,
            )
        self._index_principals: list[iam.IRole] = []
        self.domain = self._domain(stage.search, domain_name, stage.removal_policy, observability)

    def _table(self, construct_id: str, stage: StageConfig) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            partition_key=dynamodb.Attribute(name="pk", type=STRING),
            sort_key=dynamodb.Attribute(name="sk", type=STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # Items without the attribute never expire; items that set it go on their own.
            time_to_live_attribute=TTL_ATTRIBUTE,
            removal_policy=stage.removal_policy,
            deletion_protection=stage.removal_policy == RemovalPolicy.RETAIN,
        )

    def _domain(
        self,
        sizing: SearchSizing,
        domain_name: str,
        removal_policy: RemovalPolicy,
        observability: Observability,
    ) -> opensearch.Domain:
        slow_search = observability.log_group("SearchSlowLogs")
        slow_index = observability.log_group("IndexSlowLogs")
        app_logs = observability.log_group("SearchAppLogs")
        stack = Stack.of(self)
        # Built from the fixed name, not the domain's own attributes, so that the domain can
        # depend on the log policy and carry its access policy without a reference cycle.
        self._domain_arn = stack.format_arn(service="es", resource="domain", resource_name=domain_name)
        multi_az = sizing.availability_zones > 1
        domain = opensearch.Domain(
            self,
            "Search",
            domain_name=domain_name,
            version=opensearch.EngineVersion.OPENSEARCH_2_19,
            capacity=opensearch.CapacityConfig(
                data_nodes=sizing.data_nodes,
                data_node_instance_type=sizing.data_instance,
                master_nodes=sizing.master_nodes or None,
                master_node_instance_type=sizing.master_instance,
                multi_az_with_standby_enabled=False,
            ),
            zone_awareness=opensearch.ZoneAwarenessConfig(
                enabled=multi_az,
                availability_zone_count=sizing.availability_zones if multi_az else None,
            ),
            ebs=opensearch.EbsOptions(volume_size=sizing.volume_gib, volume_type=ec2.EbsDeviceVolumeType.GP3),
            node_to_node_encryption=True,
            encryption_at_rest=opensearch.EncryptionAtRestOptions(enabled=True),
            enforce_https=True,
            # TLS 1.2 or later, and only cipher suites with forward secrecy.
            tls_security_policy=opensearch.TLSSecurityPolicy.TLS_1_2_PFS,
            logging=opensearch.LoggingOptions(
                slow_search_log_enabled=True,
                slow_search_log_group=slow_search,
                slow_index_log_enabled=True,
                slow_index_log_group=slow_index,
                app_log_enabled=True,
                app_log_group=app_logs,
            ),
            # CDK would write the log groups' resource policy through a custom resource (a Lambda
            # function of its own); the native AWS::Logs::ResourcePolicy below does the same job.
            suppress_logs_resource_policy=True,
            enable_version_upgrade=True,
            removal_policy=removal_policy,
        )
        log_policy = logs.ResourcePolicy(
            self,
            "SearchLogsPolicy",
            policy_statements=[
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal("es.amazonaws.com")],
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[g.log_group_arn for g in (slow_search, slow_index, app_logs)],
                    conditions={
                        "StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn": self._domain_arn},
                    },
                )
            ],
        )
        domain.node.add_dependency(log_policy)
        # Set on the L1 resource: the L2's `access_policies` goes through a custom resource too.
        cfn = domain.node.default_child
        assert isinstance(cfn, opensearch.CfnDomain)
        cfn.access_policies = Lazy.any(_AccessPolicy(self._domain_arn, self._index_principals))
        acknowledge(
            domain,
            "AwsSolutions-OS1",
            "The domain is reached only by Lambda functions that run outside a VPC; access is "
            "restricted by its resource policy to SigV4-signed requests from two named roles.",
        )
        acknowledge(
            domain,
            "AwsSolutions-OS3",
            "Lambda functions have no fixed IP addresses to allowlist; the resource policy admits "
            "only SigV4-signed requests from the agent and consolidate roles instead.",
        )
        if not sizing.master_nodes:
            acknowledge(
                domain,
                "AwsSolutions-OS4",
                "Dedicated masters would double the floor of a small stage: one data node (dev) "
                "has nothing to elect, and three master-eligible data nodes (team) keep a quorum "
                "when one is lost; prod runs three dedicated master nodes (infra/config.py).",
            )
        if not multi_az:
            acknowledge(
                domain,
                "AwsSolutions-OS7",
                "The dev stage runs a single node, which cannot spread across zones; prod enables "
                "zone awareness over three availability zones (infra/config.py).",
            )
        return domain

    def grant_memory_read_write(self, function: lambda_.Function) -> None:
        """Read and write the memory table and query its indexes (triples by subject, by object)."""
        self.memory.grant_read_write_data(function)
        acknowledge(
            _role(function),
            f"AwsSolutions-IAM5[Resource::<{_logical_id(self.memory)}.Arn>/index/*]",
            "DynamoDB grants name a table's indexes as table/index/*; the only indexes under this "
            "table are GSI1 and GSI2, which the memory store queries for triples.",
        )

    def grant_consolidator_sessions(self, function: lambda_.Function) -> None:
        """The consolidate function's reach into the sessions table: CONSOLIDATOR_SESSIONS_ACCESS,
        where grant_read_write_data would give every action on every item (Scan, BatchWriteItem,
        deleting sessions and outbox entries)."""
        for actions, partitions in CONSOLIDATOR_SESSIONS_ACCESS:
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=list(actions),
                    resources=[self.sessions.table_arn],
                    conditions={
                        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(partitions)},
                        # ForAllValues holds for a request naming no partition key; these all name one.
                        "Null": {"dynamodb:LeadingKeys": "false"},
                    },
                )
            )

    def grant_outbox_read(self, function: lambda_.Function, workspaces: Iterable[str]) -> None:
        """dynamodb:Query on the sessions table, only in these web workspaces' outbox partitions.

        The webhook reads a session's replies (DynamoOutbox.read, a Query) and nothing else of the
        table, which also holds sessions, identities, budgets and the audit log. grant_read_data
        would give it GetItem, Scan and BatchGetItem over all of that; this statement gives the
        one action, and dynamodb:LeadingKeys pins every partition key it may name to the outbox
        of a workspace that has a web signing secret (the only ones whose outbox it serves).
        """
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Query"],
                resources=[self.sessions.table_arn],
                conditions={
                    "ForAllValues:StringLike": {
                        "dynamodb:LeadingKeys": [outbox_partitions(w) for w in workspaces]
                    },
                    # ForAllValues holds for a request with no partition key at all; a Query always
                    # names one, and this keeps the statement from ever matching one that does not.
                    "Null": {"dynamodb:LeadingKeys": "false"},
                },
            )
        )

    def grant_media_usage(self, function: lambda_.Function, workspaces: Iterable[str]) -> None:
        """GetItem and UpdateItem on these workspaces' day totals of attached files
        (DynamoMediaUsage: pk "WS#{ws}#MEDIA_USAGE"), and nothing else of the sessions table: the
        webhook checks and counts the chat page's uploads there (shared.media.upload)."""
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                resources=[self.sessions.table_arn],
                conditions={
                    "ForAllValues:StringEquals": {
                        "dynamodb:LeadingKeys": [f"WS#{w}#MEDIA_USAGE" for w in workspaces]
                    },
                    "Null": {"dynamodb:LeadingKeys": "false"},
                },
            )
        )

    def grant_route_read(self, function: lambda_.Function) -> None:
        """dynamodb:GetItem on the sessions table's channel routes partition, and nothing else.

        The webhook reads one route per request to /webhooks/{platform}/{name} (DynamoRouteStore:
        pk "ROUTES", sk "{platform}#{name}"); LeadingKeys pins it to that one partition.
        """
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[self.sessions.table_arn],
                conditions={
                    "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [ROUTES_PARTITION]},
                    "Null": {"dynamodb:LeadingKeys": "false"},
                },
            )
        )

    def grant_embedding_model(self, function: lambda_.Function, model_id: str) -> None:
        """bedrock:InvokeModel on one foundation model of the stack's region (the embedder's).

        Bedrock has no grant_* of its own for foundation models; this is the statement one would
        write, naming the one model ARN and so needing no wildcard.
        """
        model_arn = Stack.of(self).format_arn(
            service="bedrock", account="", resource="foundation-model", resource_name=model_id
        )
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=[model_arn])
        )

    def grant_index_read_write(self, function: lambda_.Function) -> None:
        """SigV4 access for this function's role: its IAM policy and the domain's resource policy."""
        self.domain.grant_read_write(function)
        self._index_principals.append(_role(function))
        acknowledge(
            _role(function),
            f"AwsSolutions-IAM5[Resource::<{_logical_id(self.domain)}.Arn>/*]",
            "OpenSearch authorises HTTP actions on paths below the domain (index names, _bulk, "
            "_search), so the grant must name domain/*; it covers this one domain and nothing else.",
        )


def _role(function: lambda_.Function) -> iam.IRole:
    # Every SigilFunction has a role of its own; acknowledging on it covers its DefaultPolicy.
    assert function.role is not None
    return function.role


def _logical_id(resource: Construct) -> str:
    # cdk-nag names a resource in a finding by its logical id, e.g. <MemoryDAE57379.Arn>.
    cfn = resource.node.default_child
    assert isinstance(cfn, CfnElement)
    return Stack.of(resource).get_logical_id(cfn)


@jsii.implements(IStableAnyProducer)
class _AccessPolicy:
    """The domain's resource policy, rendered at synth time from the roles granted by then."""

    def __init__(self, domain_arn: str, principals: list[iam.IRole]) -> None:
        self._domain_arn = domain_arn
        self._principals = principals

    def produce(self) -> Any:
        if not self._principals:
            return None
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": [role.role_arn for role in self._principals]},
                    # The same actions as the roles' own policies (Domain.grant_read_write).
                    "Action": INDEX_ACTIONS,
                    "Resource": f"{self._domain_arn}/*",
                }
            ],
        }
