"""`sigil dev --aws`: the real Lambda handlers on one machine, over moto in server mode.

What stands in for what (docs/local-aws-mode.md has the whole story):

- AWS itself: moto's ThreadedMotoServer on 127.0.0.1 (a free port), with the stack's resources
  created from the adapters' own definitions: the DynamoDB tables from TABLE_SCHEMAS, the
  `turns.fifo` queue with its FIFO dead-letter queue (maxReceiveCount = SIGIL_LANE_MAX_ATTEMPTS),
  the event bus, and the web signing secret `sigil/web/<workspace>`.
- Lambda: each function in its own process (shared.local.lambda_runtime), with the environment
  the stack gives it, AWS_ENDPOINT_URL pointing at moto and dummy credentials.
- API Gateway (HTTP API, payload 2.0): a Starlette front on the embedded gateway's port and
  routes, which turns each request into the v2 event and the function's answer back into HTTP.
- The SQS event-source mapping: one poller thread (batches of up to 10, partial batch failures,
  redelivery after the visibility timeout, moto's redrive to the dead-letter queue).
- EventBridge: the bus and its CompactionDue rule are moto's, with an SQS queue as the rule's
  target, polled into the consolidate function; a timer stands in for the hourly schedule.
- OpenSearch: osmem-server (BM25 only; it answers no k-NN query).

Nothing is persisted across restarts except the signing secret (in the data directory, where
`sigil send` reads it): moto and osmem keep their state in memory.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, get_args
from unittest import mock
from urllib.parse import parse_qsl

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.config import Settings
from shared.local.lambda_runtime import ACCOUNT_ID, FunctionPool, FunctionSpec, InvocationError

if TYPE_CHECKING:
    from osmem_server import OsmemServer

log = logging.getLogger("sigil.aws_mode")

NAME_PREFIX: Final = "sigil-local"
TURNS_QUEUE: Final = "turns.fifo"
TURNS_DLQ: Final = "turns-dlq.fifo"
EVENTS_QUEUE: Final = "consolidation-events"
EVENTS_DLQ: Final = "consolidation-events-dlq"
COMPACTION_RULE: Final = "compaction-due"
SCHEDULE_RULE: Final = f"{NAME_PREFIX}-hourly"
DEFAULT_REGION: Final = "us-east-1"
# The consolidation rule's Lambda target retries twice (infra/constructs/consolidation.py): three
# deliveries in all before the event is dropped, here kept in a dead-letter queue instead.
EVENT_DELIVERIES: Final = 3

# The webhook's routes, as API Gateway names them (infra/constructs/ingress.py, web channel only).
POST_WEB: Final = "POST /webhooks/web/{workspace}"
GET_OUTBOX: Final = "GET /sessions/{workspace}/{session}/outbox"
PLATFORM_CHANNELS: Final = ("telegram", "slack", "discord", "whatsapp")

_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class AwsModeOptions(BaseSettings):
    """The stand-ins' own knobs (SIGIL_AWS_MODE_*); the functions read the usual SIGIL_* settings."""

    model_config = SettingsConfigDict(env_prefix="SIGIL_AWS_MODE_", extra="ignore")

    # Short, so a failed turn is retried within seconds. One poller handles one batch at a time,
    # so a batch that outlasts it is never received twice (see FifoPoller).
    visibility_timeout_s: int = Field(default=2, ge=1, le=43_200)
    # EventBridge's rate(1 hour) by default; the first tick comes one interval after start, as a
    # new scheduled rule's does.
    schedule_interval_s: float = Field(default=3600.0, gt=0)
    batch_size: int = Field(default=10, ge=1, le=10)
    # How many webhook containers concurrent requests may scale out to (each is a process).
    webhook_containers: int = Field(default=2, ge=1, le=16)
    # The pollers' pause after an empty receive. Short polling: moto handles one request at a
    # time here (see _Serialised), so a long poll would hold every other caller up.
    idle_poll_s: float = Field(default=0.05, gt=0, le=5)


# ---------------------------------------------------------------- moto in server mode


class _Serialised:
    """A WSGI wrapper that runs one moto request at a time, as each AWS request applies atomically.

    moto's backends have no locking of their own: a DynamoDB TransactWriteItems that fails a
    condition restores a snapshot of the whole table (undoing a write another thread made
    meanwhile), and a Query can fail with "dictionary changed size during iteration" while a
    write lands. tests/support/moto_aws.atomic_requests closes the same gap for in-process moto.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)  # the whole response is produced under the lock
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def start_moto(host: str = "127.0.0.1") -> Any:
    """moto's ThreadedMotoServer on a free port, its WSGI app wrapped in `_Serialised`."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class AtomicMotoServer(ThreadedMotoServer):
        # ThreadedMotoServer builds its app inside this method and offers no hook for a wrapper;
        # this is its body (moto 5) with the app wrapped.
        def _server_entry(self) -> None:
            app = _Serialised(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    # Werkzeug logs every request at INFO; the pollers alone would print twenty lines a second.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = AtomicMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    return server


@contextlib.contextmanager
def fifo_redelivery_in_order() -> Iterator[None]:
    """Make moto redeliver a FIFO group's timed-out messages in order, as SQS does.

    moto 5 frees a timed-out message of its in-flight mark only when its receive loop reaches it,
    and skips it while a later message of its group is still marked: a batch of m0, m1, m2 that
    timed out comes back as m2 alone, then m0 and m1 after it. Clearing every expired mark before
    moto looks at the groups restores SQS's order. This patches the stand-in, not Sigil's code.
    """
    from moto.sqs.models import SQSBackend

    original = SQSBackend.receive_message

    def receive_message(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = backend.get_queue(queue_name)
        for message in [m for m in queue.pending_messages if m.visible]:
            queue.pending_messages.discard(message)
        return original(backend, queue_name, *args, **kwargs)

    with mock.patch.object(SQSBackend, "receive_message", receive_message):
        yield


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

    # As infra/constructs/lanes.py: dedup ids are the platforms' event ids, never the content.
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    dlq_url, dlq_arn = queue(TURNS_DLQ, {**fifo, "MessageRetentionPeriod": str(14 * 24 * 3600)})
    queue_url, queue_arn = queue(
        TURNS_QUEUE,
        {
            **fifo,
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
    events = aws_client("events", endpoint, region)
    bus = f"{NAME_PREFIX}-events"
    events.create_event_bus(Name=bus)
    # The pattern of infra/constructs/consolidation.py: every domain event type, from Sigil.
    pattern = {"source": [SOURCE], "detail-type": list(get_args(DomainEvent.model_fields["type"].annotation))}
    events.put_rule(Name=COMPACTION_RULE, EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(
        Rule=COMPACTION_RULE, EventBusName=bus, Targets=[{"Id": "consolidate", "Arn": events_queue_arn}]
    )
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
    if function != "webhook":
        env |= {
            "SIGIL_MEMORY_TABLE": resources.memory_table,
            "SIGIL_EVENT_BUS_NAME": resources.event_bus_name,
            "SIGIL_OPENSEARCH_ENDPOINT": resources.opensearch_endpoint,
            # Must equal the queue's maxReceiveCount: the agent apologises on the last delivery.
            "SIGIL_LANE_MAX_ATTEMPTS": str(settings.lane_max_attempts),
        }
    return env


def _container_environment(extra: Mapping[str, str]) -> dict[str, str]:
    # The user's environment carries the model settings (SIGIL_MODEL, OPENAI_*); a profile would
    # take precedence over the dummy credentials, and a missing one would fail every client.
    base = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")}
    return base | dict(extra)


# ---------------------------------------------------------------- API Gateway (HTTP API, v2.0)


def _request_time(epoch_s: float) -> str:
    t = time.gmtime(epoch_s)
    # Spelled out rather than %b: API Gateway writes English month names whatever the locale.
    month = _MONTHS[t.tm_mon - 1]
    return f"{t.tm_mday:02d}/{month}/{t.tm_year}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def http_api_event(
    *,
    route_key: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    path_parameters: Mapping[str, str],
    source_ip: str = "127.0.0.1",
    now: float | None = None,
    api_id: str = "local",
) -> dict[str, Any]:
    """The API Gateway HTTP API payload 2.0 event for a request (events/webhook_web.json's shape)."""
    epoch = time.time() if now is None else now
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "cookie":
            # v2 moves cookies out of the headers into their own list.
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        # Repeated headers are joined with commas in v2.
        merged[lower] = f"{merged[lower]},{value}" if lower in merged else value
    host = merged.get("host", "localhost")
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": merged,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": api_id,
            "domainName": host,
            "domainPrefix": host.split(".", 1)[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": base64.b64encode(secrets.token_bytes(10)).decode(),
            "routeKey": route_key,
            "stage": "$default",
            "time": _request_time(epoch),
            "timeEpoch": int(epoch * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if raw_query:
        query: dict[str, str] = {}
        for name, value in parse_qsl(raw_query, keep_blank_values=True):
            query[name] = f"{query[name]},{value}" if name in query else value
        event["queryStringParameters"] = query
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
    return event


def proxy_response(result: Any) -> Response:
    """A function's answer as API Gateway (payload 2.0) turns it into an HTTP response."""
    if not (isinstance(result, dict) and "statusCode" in result):
        # v2 infers the response when the function returns no statusCode: 200 with the JSON.
        return Response(json.dumps(result), status_code=200, media_type="application/json")
    raw = result.get("body") or ""
    body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
    response = Response(body, status_code=int(result["statusCode"]))
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    for cookie in result.get("cookies") or []:
        response.headers.append("set-cookie", cookie)
    return response


class HttpFront:
    """The HTTP API: each route's request, as a v2 event, to the webhook function."""

    def __init__(self, webhook: FunctionPool, *, health: Callable[[], dict[str, Any]]) -> None:
        self.webhook = webhook
        self.health = health

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/webhooks/web/{workspace}", self._route(POST_WEB), methods=["POST"]),
                Route("/sessions/{workspace}/{session}/outbox", self._route(GET_OUTBOX), methods=["GET"]),
                # The platform channels' routes, as the stack's HTTP API declares them.
                *(
                    Route(f"/webhooks/{name}", self._route(f"POST /webhooks/{name}"), methods=["POST"])
                    for name in PLATFORM_CHANNELS
                ),
                Route("/webhooks/whatsapp", self._route("GET /webhooks/whatsapp"), methods=["GET"]),
            ]
        )

    async def _health(self, request: Request) -> Response:
        return JSONResponse(self.health())

    def _route(self, route_key: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            event = http_api_event(
                route_key=route_key,
                method=request.method,
                # The path as sent, not decoded: the client signs the request target byte for byte.
                raw_path=request.scope.get("raw_path", request.url.path.encode()).decode("latin-1"),
                raw_query=request.scope.get("query_string", b"").decode("latin-1"),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]],
                body=body,
                path_parameters=request.path_params,
                source_ip=request.client.host if request.client else "127.0.0.1",
            )
            try:
                result = await run_in_threadpool(self.webhook.invoke, event)
            except InvocationError as exc:
                # What API Gateway answers when the integration fails or times out.
                log.error("webhook function failed", extra={"route": route_key, "error": exc.error_type})
                if exc.error_type == "Sandbox.Timedout":
                    return JSONResponse({"message": "Service Unavailable"}, status_code=503)
                return JSONResponse({"message": "Internal Server Error"}, status_code=500)
            return proxy_response(result)

        return endpoint


# ---------------------------------------------------------------- the SQS event-source mapping


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """An SQS API message attribute in the shape Lambda's SQS event gives it."""

    def b64(raw: Any) -> str:
        return base64.b64encode(raw).decode() if isinstance(raw, bytes) else str(raw)

    converted: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues", [])),
        "binaryListValues": [b64(v) for v in value.get("BinaryListValues", [])],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        converted["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        converted["binaryValue"] = b64(value["BinaryValue"])
    return converted


def sqs_event(messages: Sequence[Mapping[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """ReceiveMessage's messages as the SQS event Lambda delivers (events/agent_sqs_fifo_batch.json)."""
    records = []
    for m in messages:
        record: dict[str, Any] = {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": dict(m.get("Attributes", {})),
            "messageAttributes": {
                name: _lambda_message_attribute(value)
                for name, value in m.get("MessageAttributes", {}).items()
            },
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }
        if "MD5OfMessageAttributes" in m:
            record["md5OfMessageAttributes"] = m["MD5OfMessageAttributes"]
        records.append(record)
    return {"Records": records}


@dataclass
class _PollerThread:
    """A daemon thread running `step` until stopped; `step` says whether it found work."""

    name: str
    step: Callable[[], bool]
    idle_s: float
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.step()
            except Exception:
                # A poller that dies silently would look like a lost message; keep polling.
                log.exception("poller step failed", extra={"poller": self.name})
                busy = False
            if not busy:
                self._stop.wait(self.idle_s)


class FifoPoller:
    """The agent's SQS FIFO event-source mapping: receive a batch, invoke, delete what succeeded.

    One batch at a time. Lambda runs batches of different message groups in parallel; one at a
    time keeps every guarantee (a group's messages are never in two batches at once, and each
    batch is in group order) and is what makes a short visibility timeout safe: a batch that
    outlasts it is not received again by anyone while it runs.
    """

    def __init__(
        self,
        sqs: Any,
        *,
        queue_url: str,
        queue_arn: str,
        region: str,
        invoke: Callable[[dict[str, Any]], Any],
        batch_size: int = 10,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.region = region
        self.invoke = invoke
        self.batch_size = batch_size

    def poll_once(self) -> int:
        """Handle one batch; the number of records received (0 when the queue had none visible)."""
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            # Lambda's records carry every system attribute: the group, the sequence number and
            # ApproximateReceiveCount, which the agent compares with maxReceiveCount.
            AttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return 0
        try:
            result = self.invoke(sqs_event(messages, queue_arn=self.queue_arn, region=self.region))
        except InvocationError as exc:
            # A function error fails the whole batch: every record comes back after the timeout.
            log.warning(
                "agent batch failed; its records return after the visibility timeout",
                extra={"records": len(messages), "error": exc.error_type},
            )
            return len(messages)
        failed = _failed_ids(result, {m["MessageId"] for m in messages})
        if failed is None:
            log.warning("agent answered an unreadable batchItemFailures; the whole batch is retried")
            return len(messages)
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            answer = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in answer.get("Failed", []):
                log.warning("could not delete a handled record", extra={"code": failure.get("Code")})
        if failed:
            log.info(
                "records failed; they return after the visibility timeout",
                extra={
                    "failed": len(failed),
                    "records": len(messages),
                    "receive_counts": ",".join(
                        m["Attributes"].get("ApproximateReceiveCount", "?")
                        for m in messages
                        if m["MessageId"] in failed
                    ),
                },
            )
        return len(messages)


def _failed_ids(result: Any, received: set[str]) -> set[str] | None:
    """The message ids a partial batch response lists; None when Lambda would fail the batch.

    Lambda treats a response it cannot read, or an id that is empty or not in the batch, as a
    failure of the whole batch.
    """
    if result is None:
        return set()
    if not isinstance(result, dict):
        return None
    failures = result.get("batchItemFailures") or []
    if not isinstance(failures, list):
        return None
    ids = set()
    for failure in failures:
        item = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not item or item not in received:
            return None
        ids.add(item)
    return ids


def schedule_event(region: str, *, now: float | None = None) -> dict[str, Any]:
    """An EventBridge scheduled event (events/consolidate_schedule.json's shape)."""
    at = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{ACCOUNT_ID}:rule/{SCHEDULE_RULE}"],
        "detail": {},
    }


class ConsolidationFeed:
    """The consolidate function's two triggers: the bus rule's queue, and the schedule's timer.

    Each event is its own invocation, as EventBridge invokes a Lambda target once per event. A
    failed event is received again after the visibility timeout, up to EVENT_DELIVERIES times.
    """

    def __init__(
        self,
        sqs: Any,
        *,
        queue_url: str,
        region: str,
        invoke: Callable[[dict[str, Any]], Any],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.region = region
        self.invoke = invoke
        self.interval_s = interval_s
        self.clock = clock
        self.next_tick = clock() + interval_s

    def poll_once(self) -> bool:
        busy = self._tick()
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        for message in messages:
            event = json.loads(message["Body"])
            # moto's SQS target leaves the envelope's `account` out; EventBridge always sends it.
            event.setdefault("account", ACCOUNT_ID)
            try:
                self.invoke(event)
            except InvocationError as exc:
                log.warning(
                    "consolidate failed; the event is delivered again after the visibility timeout",
                    extra={"event_id": event.get("id"), "error": exc.error_type},
                )
                continue
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return busy or bool(messages)

    def _tick(self) -> bool:
        if self.clock() < self.next_tick:
            return False
        # One tick for however many intervals passed, as a schedule does not replay missed runs.
        while self.next_tick <= self.clock():
            self.next_tick += self.interval_s
        try:
            self.invoke(schedule_event(self.region))
        except InvocationError as exc:
            log.warning("scheduled consolidation failed", extra={"error": exc.error_type})
        return True


# ---------------------------------------------------------------- the whole mode


def start_osmem() -> OsmemServer:
    try:
        from osmem_server import OsmemServer
    except ImportError:
        raise SystemExit(
            "sigil dev --aws needs osmem-server and moto[server] (the project's dev dependencies): "
            "run `make dev` or `uv pip sync requirements.lock`"
        ) from None
    # Japanese analysis (kuromoji) is not needed: the index maps `text` with the english analyser.
    return OsmemServer.start(addr="127.0.0.1:0", japanese=False)


class AwsModeGateway:
    """moto, osmem-server, the three functions' containers, the HTTP front and the pollers."""

    def __init__(self, settings: Settings, options: AwsModeOptions | None = None) -> None:
        self.settings = settings
        self.options = options if options is not None else AwsModeOptions()
        self.region = settings.aws_region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        self._stack = contextlib.ExitStack()
        self._pollers: list[_PollerThread] = []
        self._pools: list[FunctionPool] = []
        self.resources: LocalResources | None = None
        self.web_secret: str | None = None
        self.model_problem: str | None = None
        self.webhook: FunctionPool | None = None

    # -- lifecycle

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        try:
            from moto.sqs.models import SQSBackend  # noqa: F401 - only to fail early with a clear message
        except ImportError:
            raise SystemExit(
                "sigil dev --aws needs moto[server] (a dev dependency): run `make dev`"
            ) from None
        self._stack.enter_context(fifo_redelivery_in_order())
        # Loopback whatever --host says: moto accepts any credentials, so it must not be reachable
        # from the network even when the gateway's front is.
        moto = start_moto("127.0.0.1")
        self._stack.callback(moto.stop)
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        osmem = start_osmem()
        self._stack.callback(osmem.close)

        self.resources = resources = provision(
            endpoint,
            self.region,
            opensearch_endpoint=osmem.url,
            secrets_prefix=self.settings.secrets_prefix,
            max_receive_count=self.settings.lane_max_attempts,
            visibility_timeout_s=self.options.visibility_timeout_s,
        )

        specs = {
            # Timeouts and memory sizes of infra/constructs (ingress, agent, consolidation).
            "webhook": (
                "functions.webhook.handler.lambda_handler",
                10.0,
                512,
                self.options.webhook_containers,
            ),
            "agent": ("functions.agent.handler.lambda_handler", 600.0, 1024, 1),
            "consolidate": ("functions.consolidate.handler.lambda_handler", 900.0, 1024, 1),
        }
        pools: dict[str, FunctionPool] = {}
        for function, (handler, timeout_s, memory_mb, containers) in specs.items():
            spec = FunctionSpec(
                name=f"{NAME_PREFIX}-{function}",
                handler=handler,
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                env=_container_environment(function_env(resources, function, self.settings)),
                region=self.region,
            )
            pools[function] = FunctionPool(spec, max_containers=containers)
        self._pools = list(pools.values())
        self._stack.callback(self._stop_pools)
        # Started together so the three imports overlap with each other and with the rest of the
        # setup, then awaited: a handler that cannot be imported stops the gateway here rather
        # than failing its first request.
        for pool in self._pools:
            pool.start()
        self.web_secret = self._ensure_workspace(resources)
        self._check_model()  # imports the model's SDK (~0.5 s) while the containers import theirs
        for pool in self._pools:
            pool.wait_ready()
        self.webhook = pools["webhook"]

        sqs = aws_client("sqs", endpoint, self.region)
        turns = FifoPoller(
            sqs,
            queue_url=resources.queue_url,
            queue_arn=resources.queue_arn,
            region=self.region,
            invoke=pools["agent"].invoke,
            batch_size=self.options.batch_size,
        )
        feed = ConsolidationFeed(
            sqs,
            queue_url=resources.events_queue_url,
            region=self.region,
            invoke=pools["consolidate"].invoke,
            interval_s=self.options.schedule_interval_s,
        )
        self._pollers = [
            _PollerThread("sqs-esm:agent", lambda: turns.poll_once() > 0, self.options.idle_poll_s),
            _PollerThread("events:consolidate", feed.poll_once, self.options.idle_poll_s),
        ]
        for poller in self._pollers:
            poller.start()

    def stop(self) -> None:
        # Pollers first, each given time to finish its batch; then the containers and servers.
        for poller in self._pollers:
            poller.stop(timeout_s=5.0)
        self._pollers = []
        self._stack.close()

    def _stop_pools(self) -> None:
        for pool in self._pools:
            pool.kill()  # a batch still running after the pollers' grace is abandoned, as on shutdown
            pool.stop(timeout_s=2.0)
        self._pools = []

    # -- setup helpers

    def _ensure_workspace(self, resources: LocalResources) -> str:
        """The workspace's config and web signing secret, in moto and in the local secret file.

        The secret is kept in the data directory, so it survives restarts (moto does not) and
        `sigil send` / `sigil replies` find it where the embedded gateway keeps it.
        """
        from shared.adapters.aws.dynamodb import DynamoWorkspaceStore
        from shared.adapters.embedded import FileSecretStore
        from shared.adapters.embedded import open_data_dir as _open_data_dir
        from shared.channels import web
        from shared.models import WorkspaceConfig

        workspace = self.settings.default_workspace
        data_dir = _open_data_dir(self.settings.data_dir)
        secret = FileSecretStore(data_dir / "secrets.json").ensure(web.secret_name(workspace))
        aws_client("secretsmanager", resources.endpoint, resources.region).create_secret(
            Name=resources.secrets_prefix + web.secret_name(workspace), SecretString=secret
        )
        DynamoWorkspaceStore(
            resources.memory_table, client=aws_client("dynamodb", resources.endpoint, resources.region)
        ).put(WorkspaceConfig(id=workspace, name=workspace))
        return secret

    def _check_model(self) -> None:
        """Sets `model_problem`: None when a model is usable, else what every reply will say."""
        from shared.errors import ModelNotConfigured
        from shared.providers import build_provider

        try:
            build_provider(self.settings, self.settings.resolved_model())
        except ModelNotConfigured as exc:
            self.model_problem = exc.message

    # -- HTTP

    def app(self) -> Starlette:
        assert self.webhook is not None, "start() the gateway first"
        return HttpFront(self.webhook, health=self._health).app()

    def _health(self) -> dict[str, Any]:
        return {"status": "ok", "model_configured": self.model_problem is None, "mode": "aws"}

    def banner(self) -> str:
        assert self.resources is not None  # started
        s, r = self.settings, self.resources
        base = f"http://{s.host}:{s.port}"
        ws = s.default_workspace
        model_line = (
            s.resolved_model() if self.model_problem is None else f"NOT CONFIGURED. {self.model_problem}"
        )
        return "\n".join(
            [
                f"Sigil local gateway on {base}   state: {s.data_dir.resolve()} (the signing secret only)",
                "  mode:     AWS handlers over moto (webhook, agent, consolidate; docs/local-aws-mode.md)",
                f"  model:    {model_line}",
                f"  send:     POST {base}/webhooks/web/{ws}   JSON {{event_id, session, user, text}}",
                "            signed with X-Sigil-Timestamp and X-Sigil-Signature (see docs/web-channel.md)",
                f"  replies:  GET  {base}/sessions/{ws}/<session>/outbox?after=<seq>   (JSON)",
                f"  aws:      moto on {r.endpoint} (region {r.region}): queue {TURNS_QUEUE}, "
                f"DLQ {TURNS_DLQ}, bus {r.event_bus_name}, tables {r.sessions_table} {r.memory_table}",
                f"  index:    osmem-server on {r.opensearch_endpoint} (BM25 only, no k-NN)",
                "  state:    in memory: a restart starts from empty tables and queues",
                '  try:      sigil send "hello" --session demo --wait',
            ]
        )


def serve(settings: Settings) -> None:
    """Run the mode until interrupted (the `sigil dev --aws` command)."""
    import uvicorn

    gateway = AwsModeGateway(settings)
    gateway.start()
    try:
        print(gateway.banner(), file=sys.stderr, flush=True)
        uvicorn.run(gateway.app(), host=settings.host, port=settings.port, log_config=None)
    finally:
        gateway.stop()
