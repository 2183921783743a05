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

One module per stand-in: `servers` (moto, osmem-server), `resources` (the stack on moto and the
functions' environments), `http_front` (API Gateway), `event_source` (the SQS mapping),
`schedule` (EventBridge's rule and timer); `orchestrator` starts and stops them as one.
"""

from __future__ import annotations

from shared.local.aws_mode.event_source import FifoPoller, PollerThread, sqs_event
from shared.local.aws_mode.http_front import (
    GET_OUTBOX,
    PLATFORM_CHANNELS,
    POST_WEB,
    HttpFront,
    http_api_event,
    proxy_response,
)
from shared.local.aws_mode.orchestrator import AwsModeGateway, AwsModeOptions, serve
from shared.local.aws_mode.resources import (
    COMPACTION_RULE,
    DEFAULT_REGION,
    EVENT_DELIVERIES,
    EVENTS_DLQ,
    EVENTS_QUEUE,
    NAME_PREFIX,
    TURNS_DLQ,
    TURNS_QUEUE,
    LocalResources,
    aws_client,
    function_env,
    provision,
)
from shared.local.aws_mode.schedule import SCHEDULE_RULE, ConsolidationFeed, schedule_event
from shared.local.aws_mode.servers import fifo_redelivery_in_order, start_moto, start_osmem

__all__ = [
    "COMPACTION_RULE",
    "DEFAULT_REGION",
    "EVENTS_DLQ",
    "EVENTS_QUEUE",
    "EVENT_DELIVERIES",
    "GET_OUTBOX",
    "NAME_PREFIX",
    "PLATFORM_CHANNELS",
    "POST_WEB",
    "SCHEDULE_RULE",
    "TURNS_DLQ",
    "TURNS_QUEUE",
    "AwsModeGateway",
    "AwsModeOptions",
    "ConsolidationFeed",
    "FifoPoller",
    "HttpFront",
    "LocalResources",
    "PollerThread",
    "aws_client",
    "fifo_redelivery_in_order",
    "function_env",
    "http_api_event",
    "provision",
    "proxy_response",
    "schedule_event",
    "serve",
    "sqs_event",
    "start_moto",
    "start_osmem",
]
