"""Cached boto3 clients: one per (service, region, endpoint), built on first use, never at import.

A Lambda container reuses its clients across invocations (connection pools and credentials are
the expensive part), and tests get a fresh set with `reset()`. `AWS_ENDPOINT_URL` is read when a
client is asked for, not at import, so moto in server mode (or LocalStack) is one variable away.

Every client's calls end by the deadline in scope (a turn's: shared.deadline.boto):
a turn's store reads and writes, skill reads and WebSocket posts, retries included.
"""

from __future__ import annotations

import os
import threading
from functools import cache
from typing import TYPE_CHECKING, Any

from shared.deadline.boto import bound_to_deadline

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_events.client import EventBridgeClient
    from mypy_boto3_secretsmanager.client import SecretsManagerClient
    from mypy_boto3_sqs.client import SQSClient

# boto3's default session is not thread-safe while it builds a client; the agent's thread pools
# may ask for their first client at the same moment.
_build_lock = threading.Lock()


def _endpoint(explicit: str | None) -> str | None:
    return explicit or os.environ.get("AWS_ENDPOINT_URL") or None


@cache
def _client(service: str, region: str | None, endpoint_url: str | None) -> Any:
    # Deferred: only the cloud adapters need boto3 (~0.2 s to import); the embedded runtime never pays.
    import boto3
    from botocore.config import Config

    # Standard mode retries throttling and transient errors with jittered backoff (legacy mode,
    # boto3's default, retries fewer error codes).
    config = Config(retries={"mode": "standard", "max_attempts": 4})
    # The typed wrappers below give each client its stub type; boto3-stubs' overloads only accept a
    # literal service name, which this shared builder does not have.
    build: Any = boto3.client
    with _build_lock:
        client = build(service, region_name=region, endpoint_url=endpoint_url, config=config)
    return bound_to_deadline(client)


def dynamodb(region: str | None = None, endpoint_url: str | None = None) -> DynamoDBClient:
    client: DynamoDBClient = _client("dynamodb", region, _endpoint(endpoint_url))
    return client


def sqs(region: str | None = None, endpoint_url: str | None = None) -> SQSClient:
    client: SQSClient = _client("sqs", region, _endpoint(endpoint_url))
    return client


def events(region: str | None = None, endpoint_url: str | None = None) -> EventBridgeClient:
    client: EventBridgeClient = _client("events", region, _endpoint(endpoint_url))
    return client


def secretsmanager(region: str | None = None, endpoint_url: str | None = None) -> SecretsManagerClient:
    client: SecretsManagerClient = _client("secretsmanager", region, _endpoint(endpoint_url))
    return client


def s3(region: str | None = None, endpoint_url: str | None = None) -> Any:
    # Any: the layer's stubs hold no S3 types (mypy_boto3_s3 is not a dependency).
    return _client("s3", region, _endpoint(endpoint_url))


def scheduler(region: str | None = None, endpoint_url: str | None = None) -> Any:
    """EventBridge Scheduler's client (untyped: no boto3 stubs for it are installed)."""
    return _client("scheduler", region, _endpoint(endpoint_url))


def lambda_(region: str | None = None, endpoint_url: str | None = None) -> Any:
    # The agent asks the sandbox's precompile function to fill the compiled-module cache.
    return _client("lambda", region, _endpoint(endpoint_url))


def apigatewaymanagementapi(endpoint_url: str, region: str | None = None) -> Any:
    """The WebSocket API's management client (untyped: no boto3 stubs for it are installed).

    Always an explicit endpoint: the management API lives at the WebSocket API's own URL."""
    return _client("apigatewaymanagementapi", region, endpoint_url)


def reset() -> None:
    """Forget every cached client (tests that start a fresh moto mock call this)."""
    _client.cache_clear()
