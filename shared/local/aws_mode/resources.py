"""The stack's resources on moto, and each function's environment pointing at them.

Everything is created from the definitions the adapters themselves use (the DynamoDB tables from
TABLE_SCHEMAS, the domain event types from the model), so the stand-in cannot drift from them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args

from shared.config import Settings

NAME_PREFIX: Final = "sigil-local"
# The media bucket's CORS here: the chat page is on the gateway's port, moto on another, both on
# loopback (the stack's bucket admits the HTTP API's origin and `web_origin` alone).
UPLOAD_CORS: Final = {
    "CORSRules": [{"AllowedMethods": ["POST"], "AllowedOrigins": ["*"], "AllowedHeaders": ["*"]}]
}
TURNS_QUEUE: Final = "turns.fifo"
TURNS_DLQ: Final = "turns-dlq.fifo"
EVENTS_QUEUE: Final = "consolidation-events"
EVENTS_DLQ: Final = "consolidation-events-dlq"
COMPACTION_RULE: Final = "compaction-due"
# Per-turn extraction's delay queue and its dead-letter queue (infra/constructs/consolidation.py).
EXTRACTION_QUEUE: Final = "extraction"
EXTRACTION_DLQ: Final = "extraction-dlq"
EXTRACTION_RECEIVES: Final = 3
# EventBridge Scheduler's group and the role its schedules send as (infra/constructs/schedules.py);
# moto's scheduler keeps the schedules, shared.local.aws_mode.scheduler fires them.
SCHEDULE_GROUP: Final = f"{NAME_PREFIX}-schedules"
SCHEDULER_ROLE: Final = f"{NAME_PREFIX}-scheduler"
DEFAULT_REGION: Final = "us-east-1"
# The consolidation rule's Lambda target retries twice (infra/constructs/consolidation.py): three
# deliveries in all before the event is dropped, here kept in a dead-letter queue instead.
EVENT_DELIVERIES: Final = 3


def aws_client(service: str, endpoint: str, region: str) -> Any:
    """A boto3 client on moto for the gateway's own calls (provisioning and the pollers)."""
    import boto3
    from botocore.config import Config

    # The gateway's process keeps the user's environment as it is: endpoint, region and dummy
    # credentials are passed here, and set only in the functions' environments.
    build: Any = boto3.session.Session().client
    return build(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 - moto accepts any credentials
        config=Config(retries={"mode": "standard", "max_attempts": 4}),
    )


@dataclass(frozen=True)
class LocalResources:
    """Where each stand-in lives: what the stack's outputs would say."""

    endpoint: str
    region: str
    sessions_table: str
    memory_table: str
    queue_url: str
    queue_arn: str
    dlq_url: str
    event_bus_name: str
    events_queue_url: str
    events_dlq_url: str
    opensearch_endpoint: str
    secrets_prefix: str
    skills_bucket: str = ""  # as the stack's SkillsBucket (docs/skills.md)
    media_bucket: str = ""  # as the stack's MediaBucket (docs/media.md)
    # The extraction queue (per-turn extraction's TurnCommitted, delayed), as the stack's.
    extraction_queue_url: str = ""
    extraction_queue_arn: str = ""
    # Things done later (docs/schedules.md): Scheduler's group and the role its targets send as.
    schedule_group: str = ""
    schedule_role_arn: str = ""


def provision(
    endpoint: str,
    region: str,
    *,
    opensearch_endpoint: str,
    secrets_prefix: str,
    max_receive_count: int,
    visibility_timeout_s: int,
) -> LocalResources:
    """Create the stack's resources on moto, from the same definitions the adapters use."""
    from shared.adapters.aws.dynamodb import create_tables
    from shared.adapters.aws.events import SOURCE
    from shared.models import DomainEvent

    sessions_table, memory_table = f"{NAME_PREFIX}-sessions", f"{NAME_PREFIX}-memory"
    create_tables(
        aws_client("dynamodb", endpoint, region), sessions_table=sessions_table, memory_table=memory_table
    )

    sqs = aws_client("sqs", endpoint, region)

    def queue(name: str, attributes: dict[str, str]) -> tuple[str, str]:
        url: str = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        return url, arn

    # As infra/constructs/lanes.py: dedup ids are the platforms' event ids, never the content,
    # except on the turns queue for EventBridge Scheduler's messages, which carry none.
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    dlq_url, dlq_arn = queue(TURNS_DLQ, {**fifo, "MessageRetentionPeriod": str(14 * 24 * 3600)})
    queue_url, queue_arn = queue(
        TURNS_QUEUE,
        {
            **fifo,
            "ContentBasedDeduplication": "true",
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
            "VisibilityTimeout": str(visibility_timeout_s),
            # The agent apologises on a record's last delivery, judged against the same setting.
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            ),
        },
    )

    events_dlq_url, events_dlq_arn = queue(EVENTS_DLQ, {})
    events_queue_url, events_queue_arn = queue(
        EVENTS_QUEUE,
        {
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": events_dlq_arn, "maxReceiveCount": EVENT_DELIVERIES}
            ),
        },
    )
    _, extraction_dlq_arn = queue(EXTRACTION_DLQ, {})
    extraction_queue_url, extraction_queue_arn = queue(
        EXTRACTION_QUEUE,
        {
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": extraction_dlq_arn, "maxReceiveCount": EXTRACTION_RECEIVES}
            ),
        },
    )
    events = aws_client("events", endpoint, region)
    bus = f"{NAME_PREFIX}-events"
    events.create_event_bus(Name=bus)
    # The pattern of infra/constructs/consolidation.py: every domain event type, from Sigil.
    pattern = {"source": [SOURCE], "detail-type": list(get_args(DomainEvent.model_fields["type"].annotation))}
    events.put_rule(Name=COMPACTION_RULE, EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(
        Rule=COMPACTION_RULE, EventBusName=bus, Targets=[{"Id": "consolidate", "Arn": events_queue_arn}]
    )
    skills_bucket = f"{NAME_PREFIX}-skills"
    aws_client("s3", endpoint, region).create_bucket(Bucket=skills_bucket)
    media_bucket = f"{NAME_PREFIX}-media"
    aws_client("s3", endpoint, region).create_bucket(Bucket=media_bucket)
    # The chat page posts files straight to the bucket (a presigned POST), from its own origin.
    aws_client("s3", endpoint, region).put_bucket_cors(Bucket=media_bucket, CORSConfiguration=UPLOAD_CORS)
    aws_client("scheduler", endpoint, region).create_schedule_group(Name=SCHEDULE_GROUP)
    # Only Scheduler may assume it, as the stack's (moto checks neither the trust nor the grant).
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    role_arn: str = aws_client("iam", endpoint, region).create_role(
        RoleName=SCHEDULER_ROLE, AssumeRolePolicyDocument=json.dumps(trust)
    )["Role"]["Arn"]
    return LocalResources(
        endpoint=endpoint,
        region=region,
        sessions_table=sessions_table,
        memory_table=memory_table,
        queue_url=queue_url,
        queue_arn=queue_arn,
        dlq_url=dlq_url,
        event_bus_name=bus,
        events_queue_url=events_queue_url,
        events_dlq_url=events_dlq_url,
        opensearch_endpoint=opensearch_endpoint,
        secrets_prefix=secrets_prefix,
        skills_bucket=skills_bucket,
        media_bucket=media_bucket,
        extraction_queue_url=extraction_queue_url,
        extraction_queue_arn=extraction_queue_arn,
        schedule_group=SCHEDULE_GROUP,
        schedule_role_arn=role_arn,
    )


def function_env(resources: LocalResources, function: str, settings: Settings) -> dict[str, str]:
    """A function's environment: what infra/stack.py gives it, pointed at the stand-ins."""
    env = {
        # What a Lambda sandbox sets, with moto's endpoint and credentials it accepts.
        "AWS_ENDPOINT_URL": resources.endpoint,
        "AWS_REGION": resources.region,
        "AWS_DEFAULT_REGION": resources.region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_LAMBDA_FUNCTION_NAME": f"{NAME_PREFIX}-{function}",
        # No X-Ray daemon here. Metrics are off unless asked for: every invocation would print a
        # CloudWatch EMF line (POWERTOOLS_METRICS_DISABLED=false in the environment brings them).
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": os.environ.get("POWERTOOLS_METRICS_DISABLED", "true"),
        "SIGIL_BACKEND": "aws",
        "SIGIL_SECRETS_PREFIX": resources.secrets_prefix,
        "SIGIL_QUEUE_URL": resources.queue_url,
        "SIGIL_SESSIONS_TABLE": resources.sessions_table,
    }
    if function == "ws":
        env["SIGIL_MEMORY_TABLE"] = resources.memory_table  # the check before queueing (infra/stack.py)
    elif function != "webhook":
        env |= {
            "SIGIL_MEMORY_TABLE": resources.memory_table,
            "SIGIL_EVENT_BUS_NAME": resources.event_bus_name,
            "SIGIL_OPENSEARCH_ENDPOINT": resources.opensearch_endpoint,
            # Must equal the queue's maxReceiveCount: the agent apologises on the last delivery.
            "SIGIL_LANE_MAX_ATTEMPTS": str(settings.lane_max_attempts),
        }
    if function == "agent" and resources.skills_bucket:
        env["SIGIL_SKILLS_BUCKET"] = resources.skills_bucket
    if resources.media_bucket and function in ("agent", "webhook", "ws"):
        # As infra/stack.py: the agent fetches into it; the webhook takes the chat page's uploads
        # (presigned POSTs, confirmed against the workspace's limits and identities in the memory
        # table) and the ws function checks a `send`'s files against it.
        env["SIGIL_MEDIA_BUCKET"] = resources.media_bucket
        if function == "webhook":
            env["SIGIL_MEMORY_TABLE"] = resources.memory_table
    if function == "agent" and resources.extraction_queue_url:
        env["SIGIL_EXTRACTION_QUEUE_URL"] = resources.extraction_queue_url
    if function == "agent" and resources.schedule_group:
        # As infra/stack.py: the agent creates and deletes the group's schedules, aimed at the queue.
        env |= {
            "SIGIL_SCHEDULE_GROUP": resources.schedule_group,
            "SIGIL_SCHEDULE_ROLE_ARN": resources.schedule_role_arn,
            "SIGIL_QUEUE_ARN": resources.queue_arn,
        }
    return env


def container_environment(extra: Mapping[str, str]) -> dict[str, str]:
    # The user's environment carries the model settings (SIGIL_MODEL, OPENAI_*); a profile would
    # take precedence over the dummy credentials, and a missing one would fail every client.
    base = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")}
    return base | dict(extra)
