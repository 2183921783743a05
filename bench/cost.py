"""What 1,000 turns cost on AWS, from measured quantities. Run by `make bench`; docs/cost.md explains it.

A realistic workload runs through the real webhook, agent and consolidate Lambda handlers, in this
process, on moto in server mode with osmem-server for OpenSearch (the resources `sigil dev --aws`
creates) and the function-backed fake model (shared.providers.function) as the chat and the
consolidation model: --turns turns (500 by default, the table scaled to 1,000) dealt round-robin
across --sessions sessions of one workspace with its default budget. Each turn is one signed
web-channel POST (the webhook), one agent turn (the SQS event-source mapping's batches: what is
queued when it polls, at most the stack's BatchSize) and one GET of the session's outbox (the web
client fetching the reply). The model answers plainly or first calls one tool (memory_search,
memory_store, memory_recall or current_time) with the mix in MIX; every 20-message window rolls
its oldest messages out to Tier 1 and OpenSearch, and every CompactionDue the agent publishes runs
the consolidate function (its summaries and facts); one scheduled (hourly) run follows the workload.
Per-turn extraction: each turn's TurnCommitted goes to the extraction queue (standard, delayed by
the 5 s debounce, which moto keeps); after a round followed by the debounce's quiet (--quiet-share of
them, the last always) the bench waits for SQS to release them and plays that queue's event source
through the real consolidate handler (batches of its mapping's BatchSize): the quiet round's events
extract, the earlier ones find a later turn and are superseded. Its share is shown line by line.

Measured, not guessed:
- every AWS API call, per service and operation, with its request and response bytes (botocore's
  before-parameter-build / before-call / after-call hooks on boto3's default session, from which
  shared.adapters.aws.clients builds every client, and on the event-source mapping's own client);
- DynamoDB read and write request units from the real item sizes (DynamoDB's sizing rules; a write
  is charged on the larger of the item before and after it, read with an uncounted client; a Query
  on every item it reads, before filters and projections); SQS requests in 64 KB chunks; EventBridge
  events in 64 KB chunks; HTTP API requests; Secrets Manager calls;
- OpenSearch index and search requests (counted at opensearch-py's connection);
- the consolidation model's prompt and answer characters (tokens estimated at 4 characters each,
  priced as its budget charges them);
- CloudWatch: the bytes each function writes to stdout (powertools' log lines, the EMF metric lines
  and the stdlib loggers' lines in Lambda's JSON format) and the metric values and series in them;
- each invocation's own time (wall clock, less the time the counting hooks take), plus the model's
  wait added arithmetically: nothing sleeps. An invocation of k model calls waits k x 3 s (or 15 s);
  the Lambda bill is priced at each function's memorySize and architecture read from the synthesised stack.

Priced with bench/prices.json (one file, a date and a source page per line). A benchmark, not a
test: it prints tables, and fails only if the workload does not run.

    .venv/bin/python bench/cost.py                  # 500 turns, 10 sessions, scaled (~5 min)
    .venv/bin/python bench/cost.py --turns 1000     # 1,000 turns (~10 min: moto slows as tables grow)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import logging
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
# functions/ and tests/ are not in the installed package; the bench runs from a plain clone.
sys.path.insert(0, str(ROOT))

from bench.aws_calls import table as text_table  # noqa: E402 -- needs the clone on sys.path first

PRICES = Path(__file__).with_name("prices.json")
WAITS_S = (3.0, 15.0)
HOURS_PER_MONTH = 730
KB = 1024
GB = 1024**3
WORKSPACE = "default"
SIGNING_SECRET = "bench-signing-secret"  # noqa: S105 - a throwaway secret on moto
MODEL = "openai/gpt-4.1-mini"
OPENAI_KEY = "sk-bench"  # read from Secrets Manager as in the cloud, never from the environment
# What the model does on a turn before it answers: (action, weight). "plain" answers at once.
MIX = (
    ("plain", 55),
    ("memory_search", 15),
    ("memory_store", 10),
    ("memory_recall", 10),
    ("current_time", 10),
)
# Which stage each function's invocations belong to: the scheduled run is the floor's, not the turns'.
FUNCTION_OF = {
    "webhook": "webhook",
    "agent": "agent",
    "consolidate": "consolidate",
    "extract": "consolidate",
    "schedule": "consolidate",
}
# "extract" is per-turn extraction's share: the agent's TurnCommitted sends, the extraction queue's
# event source (its receives and deletes) and the consolidate invocations it makes.
TURN_STAGES = ("webhook", "agent", "esm", "consolidate", "extract")
EXTRACTION_STAGES = ("extract",)
# The share of turns followed by at least the debounce (5 s) of quiet in their session, whose
# TurnCommitted extracts; the others are superseded by the next turn. One-to-one chat rarely gets
# the next turn committed within 5 s (the person reads, types, and the model answers again), so
# the superseded ones are bursts: messages sent back to back, a group's cross-talk (docs/cost.md).
QUIET_SHARE = 0.75


# ---------------------------------------------------------------- units (DynamoDB's, SQS's, ...)


def chunks(size: int, chunk: int) -> int:
    """Billed units of a payload metered in `chunk`-byte pieces: at least one."""
    return max(1, math.ceil(size / chunk))


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, by DynamoDB's item-size rules."""
    (kind, raw), *_ = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        digits = str(raw).lstrip("-").replace(".", "").lstrip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if kind == "B":
        return len(raw) if isinstance(raw, bytes | bytearray) else len(str(raw).encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in raw)
    if kind == "NS":
        return sum(attribute_size({"N": v}) for v in raw)
    if kind == "BS":
        return sum(attribute_size({"B": v}) for v in raw)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + attribute_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of a DynamoDB item: each attribute's name and value (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """Read request units: per 4 KB (at least one); half for an eventually consistent read, double
    in a transaction."""
    units = chunks(size, 4 * KB)
    if transactional:
        return 2.0 * units
    return float(units) if consistent else units / 2


def write_units(size: int, *, transactional: bool = False) -> float:
    """Write request units: per 1 KB of the larger of the item before and after (at least one),
    double in a transaction."""
    return float(chunks(size, KB) * (2 if transactional else 1))


# ---------------------------------------------------------------- usage: what the workload did


@dataclass(frozen=True)
class FunctionConfig:
    memory_mb: int
    architecture: str  # "arm64" | "x86_64"
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Invocation:
    function: str  # webhook | agent | consolidate
    own_ms: float  # our own work: the handler's wall time less the counting hooks'
    model_calls: int = 0  # each waits the model's latency, added when priced
    cpu_ms: float = 0.0  # the handler thread's CPU time, shown beside own_ms (not priced)


@dataclass
class Usage:
    """Everything the priced table is computed from; `turns` is how many turns it covers."""

    turns: int
    invocations: list[Invocation] = field(default_factory=list)
    http_requests: list[int] = field(default_factory=list)  # request + response bytes each
    sqs_payloads: list[int] = field(default_factory=list)  # each SQS FIFO request's payload bytes
    sqs_standard_payloads: list[int] = field(default_factory=list)  # the same, standard queues
    dynamodb_rru: float = 0.0
    dynamodb_wru: float = 0.0
    dynamodb_stored_bytes: int = 0  # what the turns leave in the tables (with per-item overhead)
    event_sizes: list[int] = field(default_factory=list)  # each EventBridge entry's bytes
    secrets_calls: int = 0
    log_bytes: Counter[str] = field(default_factory=Counter)  # per function
    embedding_chars: int = 0  # what Titan would embed: texts indexed and search queries
    # The consolidation model's prompts and answers (compaction's and per-turn extraction's), in
    # characters: priced at its list price per token (the chat model's is left out)
    model_chars_in: int = 0
    model_chars_out: int = 0
    # AgentCore's units (docs/cost.md says how ours map onto them)
    messages_stored: int = 0
    ltm_records: int = 0
    retrievals: int = 0
    # Shown, not priced per turn
    calls: Counter[str] = field(default_factory=Counter)  # "service.Operation" -> count
    call_bytes: Counter[str] = field(default_factory=Counter)  # "service.Operation" -> bytes
    opensearch: Counter[str] = field(default_factory=Counter)
    metric_values: int = 0
    metric_series: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Line:
    """One priced line: dollars, and the quantity they are for (scaled together)."""

    item: str
    usd: float
    quantity: float = 0.0
    unit: str = ""

    @property
    def basis(self) -> str:
        if not self.unit:
            return ""
        number = (
            f"{self.quantity:,.0f}"
            if self.quantity >= 100
            else f"{self.quantity:,.2f}".rstrip("0").rstrip(".")
        )
        return f"{number} {self.unit}"


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    items: dict[str, Any] = json.loads(path.read_text())["items"]
    return items


def _usd(prices: Mapping[str, Any], key: str) -> float:
    return float(prices[key]["usd"])


def lambda_gb_s(invocations: Sequence[Invocation], memory_mb: int, wait_s: float) -> float:
    """Billed GB-seconds: each invocation's own time plus its model waits, rounded up to 1 ms."""
    billed_ms = sum(math.ceil(i.own_ms + i.model_calls * wait_s * 1000) for i in invocations)
    return billed_ms / 1000 * memory_mb / 1024


def price_usage(
    usage: Usage,
    functions: Mapping[str, FunctionConfig],
    prices: Mapping[str, Any],
    wait_s: float,
    model_per_mtok: tuple[float, float] = (0.0, 0.0),
) -> list[Line]:
    """Dollars for everything in `usage` (its `turns` turns, unscaled), the chat model excluded;
    the consolidation model's tokens at `model_per_mtok` (USD per 1M tokens in, out)."""
    lines: list[Line] = []
    for name, config in functions.items():
        mine = [i for i in usage.invocations if i.function == name]
        if mine:
            gb_s = lambda_gb_s(mine, config.memory_mb, wait_s)
            rate = _usd(prices, f"lambda_gb_s_{config.architecture}")
            lines.append(
                Line(
                    f"Lambda {name} ({config.memory_mb} MB {config.architecture})", gb_s * rate, gb_s, "GB-s"
                )
            )
    invocations = len(usage.invocations)
    lines.append(
        Line(
            "Lambda requests", invocations * _usd(prices, "lambda_requests") / 1e6, invocations, "invocations"
        )
    )
    http = sum(chunks(n, 512 * KB) for n in usage.http_requests)
    lines.append(
        Line("API Gateway HTTP API", http * _usd(prices, "http_api_requests") / 1e6, http, "requests")
    )
    sqs = sum(chunks(n, 64 * KB) for n in usage.sqs_payloads)
    lines.append(
        Line("SQS FIFO", sqs * _usd(prices, "sqs_fifo_requests") / 1e6, sqs, "requests (64 KB chunks)")
    )
    standard = sum(chunks(n, 64 * KB) for n in usage.sqs_standard_payloads)
    lines.append(
        Line(
            "SQS standard",
            standard * _usd(prices, "sqs_standard_requests") / 1e6,
            standard,
            "requests (64 KB chunks)",
        )
    )
    lines.append(
        Line(
            "DynamoDB reads",
            usage.dynamodb_rru * _usd(prices, "dynamodb_rru") / 1e6,
            usage.dynamodb_rru,
            "RRU",
        )
    )
    lines.append(
        Line(
            "DynamoDB writes",
            usage.dynamodb_wru * _usd(prices, "dynamodb_wru") / 1e6,
            usage.dynamodb_wru,
            "WRU",
        )
    )
    stored = usage.dynamodb_stored_bytes
    per_gb = _usd(prices, "dynamodb_storage") + _usd(prices, "dynamodb_pitr")
    lines.append(Line("DynamoDB storage + PITR, 1 month", stored / GB * per_gb, stored / 1e6, "MB kept"))
    events = sum(chunks(n, 64 * KB) for n in usage.event_sizes)
    lines.append(
        Line("EventBridge events", events * _usd(prices, "eventbridge_custom_events") / 1e6, events, "events")
    )
    calls = usage.secrets_calls
    lines.append(
        Line("Secrets Manager calls", calls * _usd(prices, "secrets_api_calls") / 10_000, calls, "calls")
    )
    logged = sum(usage.log_bytes.values())
    lines.append(
        Line(
            "CloudWatch Logs ingestion",
            logged / GB * _usd(prices, "cloudwatch_logs_ingest"),
            logged / 1e6,
            "MB",
        )
    )
    lines.append(
        Line(
            "X-Ray traces",
            invocations * _usd(prices, "xray_traces") / 1e6,
            invocations,
            "traces (all sampled)",
        )
    )
    tokens = usage.embedding_chars / 4  # an estimate: about 4 characters a token in English
    lines.append(
        Line(
            "Bedrock Titan embeddings (est.)",
            tokens / 1000 * _usd(prices, "bedrock_titan_embed_v2"),
            tokens,
            "tokens (chars / 4)",
        )
    )
    tokens_in, tokens_out = usage.model_chars_in / 4, usage.model_chars_out / 4
    lines.append(
        Line(
            "consolidation model tokens (est.)",
            (tokens_in * model_per_mtok[0] + tokens_out * model_per_mtok[1]) / 1e6,
            tokens_in + tokens_out,
            "tokens (chars / 4)",
        )
    )
    return lines


def scaled(lines: Sequence[Line], factor: float) -> list[Line]:
    return [Line(x.item, x.usd * factor, x.quantity * factor, x.unit) for x in lines]


def agentcore_lines(usage: Usage, prices: Mapping[str, Any]) -> list[Line]:
    """The same turns' memory at AgentCore Memory's published fees (docs/cost.md: the mapping)."""
    events, records, reads = usage.messages_stored, usage.ltm_records, usage.retrievals
    return [
        Line(
            "short-term memory events", events / 1000 * _usd(prices, "agentcore_stm_events"), events, "events"
        ),
        Line(
            "long-term records stored, 1 month",
            records / 1000 * _usd(prices, "agentcore_ltm_storage"),
            records,
            "records",
        ),
        Line(
            "long-term retrievals",
            reads / 1000 * _usd(prices, "agentcore_ltm_retrieval"),
            reads,
            "retrievals",
        ),
    ]


# What one fetched file costs in AWS calls: shared.media.fetch over shared.adapters.aws.media (the
# bytes and the record) and shared.adapters.aws.dynamodb.media_usage (the day's counter). Counted
# on moto by tests/integration/test_media_fetch.py, so this stays what the code does.
MEDIA_CALLS_PER_FILE: dict[str, int] = {
    "s3 GetObject": 1,  # is it stored already (a retried turn)?
    "s3 PutObject": 2,  # the bytes, then the record
    "dynamodb GetItem": 1,  # the day's total so far
    "dynamodb UpdateItem": 1,  # ADD the file's size to it
}


def media_lines(
    prices: Mapping[str, Any],
    *,
    files: int = 1000,
    average_bytes: int = 500_000,
    retention_days: int = 30,
    reads_per_file: int = 1,
) -> list[Line]:
    """Media messages' own cost (docs/media.md), per `files` fetched files of `average_bytes`,
    kept `retention_days` (the bucket's lifecycle) and read `reads_per_file` times by the prompt
    side (a GetObject each). Not measured by the workload above, which sends no files: the calls
    per file are MEDIA_CALLS_PER_FILE; the Lambda time of the download is the agent's."""
    gets = files * (MEDIA_CALLS_PER_FILE["s3 GetObject"] + reads_per_file)
    puts = files * MEDIA_CALLS_PER_FILE["s3 PutObject"]
    gb_months = files * average_bytes / GB * retention_days / 30
    # The counter item is under 1 KB: one strongly consistent read unit, one write unit.
    reads = files * MEDIA_CALLS_PER_FILE["dynamodb GetItem"]
    writes = files * MEDIA_CALLS_PER_FILE["dynamodb UpdateItem"]
    return [
        Line(
            f"S3 media storage, {retention_days} days",
            gb_months * _usd(prices, "s3_standard_storage"),
            gb_months,
            "GB-months",
        ),
        Line("S3 PUT requests", puts / 1000 * _usd(prices, "s3_put_requests"), puts, "requests"),
        Line("S3 GET requests", gets / 1000 * _usd(prices, "s3_get_requests"), gets, "requests"),
        Line("DynamoDB reads (day's counter)", reads * _usd(prices, "dynamodb_rru") / 1e6, reads, "RRU"),
        Line("DynamoDB writes (day's counter)", writes * _usd(prices, "dynamodb_wru") / 1e6, writes, "WRU"),
    ]


def floor_lines(
    template: Mapping[str, Any],
    prices: Mapping[str, Any],
    schedule: Usage | None,
    functions: Mapping[str, FunctionConfig],
) -> list[Line]:
    """A stage's monthly cost with no traffic, from its synthesised template's resources."""
    resources = list(template["Resources"].values())

    def of(kind: str) -> list[dict[str, Any]]:
        return [r.get("Properties", {}) for r in resources if r["Type"] == kind]

    lines: list[Line] = []
    hourly = prices["opensearch_instance_hour"]["usd"]
    for domain in of("AWS::OpenSearchService::Domain"):
        cluster, ebs = domain.get("ClusterConfig", {}), domain.get("EBSOptions", {})
        count, kind = int(cluster.get("InstanceCount", 1)), cluster.get("InstanceType", "?")
        lines.append(
            Line("OpenSearch data nodes", count * hourly[kind] * HOURS_PER_MONTH, count, f"x {kind}")
        )
        if cluster.get("DedicatedMasterEnabled"):
            masters, master = (
                int(cluster.get("DedicatedMasterCount", 0)),
                cluster.get("DedicatedMasterType", "?"),
            )
            lines.append(
                Line("OpenSearch masters", masters * hourly[master] * HOURS_PER_MONTH, masters, f"x {master}")
            )
        if ebs.get("EBSEnabled"):
            gib = int(ebs.get("VolumeSize", 0)) * count
            gb_month = _usd(prices, "opensearch_gp3_gb_month")
            lines.append(
                Line("OpenSearch storage", gib * gb_month, gib, f"GB {ebs.get('VolumeType', 'gp3')}")
            )
    secrets = len(of("AWS::SecretsManager::Secret"))
    lines.append(
        Line("Secrets Manager secrets", secrets * _usd(prices, "secrets_secret_month"), secrets, "secrets")
    )
    alarms = of("AWS::CloudWatch::Alarm")
    # An alarm on a metric math expression is charged per metric it reads.
    alarm_metrics = sum(max(1, len([m for m in a.get("Metrics", []) if "MetricStat" in m])) for a in alarms)
    lines.append(
        Line("CloudWatch alarms", alarm_metrics * _usd(prices, "cloudwatch_alarm"), len(alarms), "alarms")
    )
    dashboards = len(of("AWS::CloudWatch::Dashboard"))
    lines.append(
        Line(
            "CloudWatch dashboards",
            dashboards * _usd(prices, "cloudwatch_dashboard"),
            dashboards,
            "dashboards",
        )
    )
    keys = len(of("AWS::KMS::Key"))
    lines.append(Line("KMS keys", keys * _usd(prices, "kms_key_month"), keys, "keys"))
    # Not measurable here: Lambda's SQS pollers long-poll an idle queue. Assumed: five 20 s long
    # polls at all times per event-source mapping (docs/cost.md), at its queue's price.
    per_mapping = 5 * 3 * 60 * HOURS_PER_MONTH
    sources = event_sources(template)
    polls = len(sources) * per_mapping
    usd = sum(
        per_mapping * _usd(prices, "sqs_fifo_requests" if s.fifo else "sqs_standard_requests") / 1e6
        for s in sources
    )
    lines.append(Line("SQS idle polling (est.)", usd, polls, "empty receives"))
    rules = [r for r in of("AWS::Events::Rule") if "ScheduleExpression" in r]
    if schedule is not None and rules:
        runs = HOURS_PER_MONTH * len(rules)
        # A scheduled run's model calls (none when nothing is due) wait the shorter latency.
        run = sum(x.usd for x in price_usage(schedule, functions, prices, WAITS_S[0])) / max(
            1, schedule.turns
        )
        lines.append(Line("hourly consolidation runs", run * runs, runs, "measured runs"))
    return lines


# ---------------------------------------------------------------- counting AWS calls


@dataclass
class ApiCall:
    stage: str
    name: str  # service.Operation
    request_bytes: int = 0
    response_bytes: int = 0
    payload_bytes: int = 0  # SQS: message bodies and attributes; EventBridge: per entry (event_sizes)
    event_sizes: list[int] = field(default_factory=list)
    rru: float = 0.0
    wru: float = 0.0
    fact_read: bool = False  # a read of Tier-3 facts (a long-term memory retrieval)
    standard: bool = False  # SQS: a standard queue's request (priced below FIFO's)


def _longest(now: Mapping[int, float], before: Mapping[int, float]) -> float:
    """The most time any one thread spent in the counting hooks since `before`."""
    return max((spent - before.get(thread, 0.0) for thread, spent in now.items()), default=0.0)


class Meter:
    """Every AWS API call the handlers make, with its bytes and DynamoDB units.

    DynamoDB sizes that a response does not show (the item a write replaced, a projected or
    filtered read's whole items) are read with `raw`, a client of another session that is not
    counted; the time that takes is kept per thread in `overhead_s` and taken off the invocation's time.
    """

    def __init__(self, raw_dynamodb: Any, stage_of: Callable[[], str | None]) -> None:
        self.raw = raw_dynamodb
        self.stage_of = stage_of
        self.calls: list[ApiCall] = []
        # Per thread: the agent runs a batch's sessions on threads at once, whose hooks overlap in
        # time, so an invocation gives back the longest any one thread spent in them, not the sum.
        self.overhead_s: dict[int, float] = defaultdict(float)
        self.overhead_cpu_s: dict[int, float] = defaultdict(float)
        self.errors: list[str] = []
        self._keys: dict[str, list[str]] = {}
        # SQS requests to these queues are their stage's, whoever makes them: the agent's sends to
        # the extraction queue are per-turn extraction's share.
        self.queue_stages: dict[str, str] = {}

    def attach(self, events: Any, stage: str | None = None) -> None:
        events.register("before-parameter-build", functools.partial(self._params, stage))
        events.register("before-call", self._before)
        events.register("after-call", self._after)

    @contextlib.contextmanager
    def _timed(self, what: str) -> Iterator[None]:
        """Time the hook, and keep its error instead of raising it into the adapter's call (which
        would fail the turn); the run reports every error and fails."""
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - reported at the end of the run
            self.errors.append(f"{what}: {exc!r}")
        finally:
            thread = threading.get_ident()
            self.overhead_s[thread] += time.perf_counter() - start
            self.overhead_cpu_s[thread] += time.thread_time() - start_cpu

    def _params(
        self, stage: str | None, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        name = f"{model.service_model.service_name}.{model.name}"
        with self._timed(name):
            queue = str(params.get("QueueUrl", "")) if name.startswith("sqs.") else ""
            call = ApiCall(stage or self.queue_stages.get(queue) or self.stage_of() or "other", name)
            call.standard = bool(queue) and not queue.endswith(".fifo")
            context["bench_call"] = call
            context["bench_params"] = params
            if name.startswith("dynamodb."):
                context["bench_before"] = self._write_targets(model.name, params)

    def _before(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        call = context.get("bench_call")
        if call is not None:
            body = params.get("body") or b""
            call.request_bytes = len(body if isinstance(body, bytes) else str(body).encode())

    def _after(
        self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        call: ApiCall | None = context.get("bench_call")
        if call is None:
            return
        with self._timed(call.name):
            call.response_bytes = len(http_response.content or b"")
            params: dict[str, Any] = context.get("bench_params", {})
            service = model.service_model.service_name
            if service == "dynamodb":
                self._dynamodb(call, model.name, params, parsed, context.get("bench_before", []))
            elif service == "sqs":
                call.payload_bytes = _sqs_payload(model.name, params, parsed)
            elif service == "events" and model.name == "PutEvents":
                call.event_sizes = [_event_size(e) for e in params.get("Entries", [])]
            self.calls.append(call)

    # -- DynamoDB

    def _key_names(self, table: str) -> list[str]:
        if table not in self._keys:
            schema = self.raw.describe_table(TableName=table)["Table"]["KeySchema"]
            self._keys[table] = [k["AttributeName"] for k in schema]
        return self._keys[table]

    def _current_size(self, table: str, key: Mapping[str, Any]) -> int:
        found = self.raw.get_item(TableName=table, Key=dict(key), ConsistentRead=True).get("Item")
        return item_size(found)

    def _write_targets(
        self, operation: str, params: Mapping[str, Any]
    ) -> list[tuple[str, dict[str, Any], int, int]]:
        """(table, key, size before, size written by a put) of every item a write touches."""
        actions: list[tuple[str, Mapping[str, Any]]] = []
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            actions = [(operation, params)]
        elif operation == "TransactWriteItems":
            kinds = {
                "Put": "PutItem",
                "Update": "UpdateItem",
                "Delete": "DeleteItem",
                "ConditionCheck": "Check",
            }
            actions = [(kinds[k], v) for entry in params.get("TransactItems", []) for k, v in entry.items()]
        elif operation == "BatchWriteItem":
            for table, requests in params.get("RequestItems", {}).items():
                for request in requests:
                    if "PutRequest" in request:
                        actions.append(("PutItem", {"TableName": table, **request["PutRequest"]}))
                    else:
                        actions.append(("DeleteItem", {"TableName": table, **request["DeleteRequest"]}))
        targets = []
        for _kind, action in actions:
            table = action["TableName"]
            item = action.get("Item")
            key = {k: item[k] for k in self._key_names(table)} if item else action["Key"]
            targets.append((table, dict(key), self._current_size(table, key), item_size(item)))
        return targets

    def _dynamodb(
        self,
        call: ApiCall,
        operation: str,
        params: Mapping[str, Any],
        parsed: Mapping[str, Any],
        before: list[tuple[str, dict[str, Any], int, int]],
    ) -> None:
        transactional = operation.startswith("Transact")
        for table, key, size_before, put_size in before:
            after = put_size or self._current_size(table, key)
            call.wru += write_units(max(size_before, after), transactional=transactional)
        if operation == "GetItem":
            size = item_size(parsed.get("Item"))
            if _projected(params) and parsed.get("Item"):
                size = self._current_size(params["TableName"], params["Key"])
            call.rru += read_units(size, consistent=bool(params.get("ConsistentRead")))
        elif operation in ("BatchGetItem", "TransactGetItems"):
            gets = (
                [
                    (t, k, bool(r.get("ConsistentRead")))
                    for t, r in params["RequestItems"].items()
                    for k in r["Keys"]
                ]
                if operation == "BatchGetItem"
                else [(g["Get"]["TableName"], g["Get"]["Key"], True) for g in params.get("TransactItems", [])]
            )
            for table, key, consistent in gets:
                call.rru += read_units(
                    self._current_size(table, key), consistent=consistent, transactional=transactional
                )
        elif operation in ("Query", "Scan"):
            items = parsed.get("Items", [])
            if _projected(params) or params.get("FilterExpression") or params.get("ScanFilter"):
                items = self._unfiltered(operation, params)
            total = sum(item_size(i) for i in items)
            call.rru += read_units(total, consistent=bool(params.get("ConsistentRead")))
            values = json.dumps(params.get("ExpressionAttributeValues", {}))
            call.fact_read = any(marker in values for marker in ("#TRIPLES", "#SUBJECT#", "#OBJECT#"))

    def _unfiltered(self, operation: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The items a Query or Scan read before its filter and projection (what it is charged on)."""
        keep = {
            k: v
            for k, v in params.items()
            if k
            in (
                "TableName",
                "IndexName",
                "KeyConditionExpression",
                "Limit",
                "ExclusiveStartKey",
                "ScanIndexForward",
                "ConsistentRead",
            )
        }
        used = set(re.findall(r"[#:][A-Za-z0-9_]+", str(keep.get("KeyConditionExpression", ""))))
        names = {k: v for k, v in params.get("ExpressionAttributeNames", {}).items() if k in used}
        values = {k: v for k, v in params.get("ExpressionAttributeValues", {}).items() if k in used}
        if names:
            keep["ExpressionAttributeNames"] = names
        if values:
            keep["ExpressionAttributeValues"] = values
        answer = (self.raw.query if operation == "Query" else self.raw.scan)(**keep)
        items: list[dict[str, Any]] = answer.get("Items", [])
        return items


def _projected(params: Mapping[str, Any]) -> bool:
    return bool(params.get("ProjectionExpression") or params.get("AttributesToGet") or params.get("Select"))


def _message_attributes_size(attributes: Mapping[str, Any]) -> int:
    size = 0
    for name, value in attributes.items():
        size += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        raw = value.get("StringValue") or value.get("BinaryValue") or b""
        size += len(raw) if isinstance(raw, bytes) else len(str(raw).encode())
    return size


def _sqs_payload(operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> int:
    """The payload an SQS request is billed on, in 64 KB chunks: the messages sent or received."""
    if operation == "SendMessage":
        messages: list[Mapping[str, Any]] = [params]
    elif operation == "SendMessageBatch":
        messages = list(params.get("Entries", []))
    elif operation == "ReceiveMessage":
        messages = list(parsed.get("Messages", []))
    else:
        return 0
    return sum(
        len(str(m.get("MessageBody", m.get("Body", ""))).encode())
        + _message_attributes_size(m.get("MessageAttributes", {}))
        for m in messages
    )


def _event_size(entry: Mapping[str, Any]) -> int:
    """An EventBridge entry's billed size: its detail, detail-type, source, resources and time."""
    size = sum(len(str(entry.get(k, "")).encode()) for k in ("Detail", "DetailType", "Source"))
    size += sum(len(r.encode()) for r in entry.get("Resources", []))
    return size + (14 if "Time" in entry else 0)


# ---------------------------------------------------------------- counting OpenSearch and logs


@dataclass
class SearchLog:
    """opensearch-py's requests, counted at its connection (osmem-server stands in for the domain)."""

    requests: list[tuple[str, str, int, int]] = field(default_factory=list)  # stage, kind, bytes out, in
    embedding_chars: Counter[str] = field(default_factory=Counter)  # per stage
    searches: Counter[str] = field(default_factory=Counter)

    @contextlib.contextmanager
    def counting(self, stage_of: Callable[[], str | None]) -> Iterator[None]:
        from opensearchpy import RequestsHttpConnection

        real = RequestsHttpConnection.perform_request
        log = self

        def perform_request(conn: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            status, headers, data = real(conn, method, url, *args, **kwargs)
            body = kwargs.get("body", args[1] if len(args) > 1 else None)
            raw = body if isinstance(body, bytes) else (str(body).encode() if body is not None else b"")
            kind = _search_kind(method, url)
            stage = stage_of() or "other"
            log.requests.append((stage, kind, len(raw), len(str(data).encode())))
            if kind in ("_bulk", "_msearch", "_search"):
                log.embedding_chars[stage] += _texts(raw, "text" if kind == "_bulk" else "query")
            if kind in ("_msearch", "_search"):
                log.searches[stage] += 1
            return status, headers, data

        with mock.patch.object(RequestsHttpConnection, "perform_request", perform_request):
            yield


def _search_kind(method: str, url: str) -> str:
    path = url.split("?", 1)[0]
    for kind in ("_bulk", "_msearch", "_search", "_update", "_delete_by_query", "_update_by_query", "_count"):
        if kind in path:
            return kind
    return f"{method} {'/'.join(p if p.startswith('_') else '*' for p in path.strip('/').split('/'))}"


def _texts(raw: bytes, key: str) -> int:
    """Characters of the string values under `key` in an (nd)JSON body: what would be embedded."""
    total = 0

    def walk(node: Any) -> None:
        nonlocal total
        if isinstance(node, dict):
            for k, v in node.items():
                if k == key and isinstance(v, str):
                    total += len(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            walk(json.loads(line))
    return total


class LogCapture(io.TextIOBase):
    """What the functions write to stdout (Lambda sends it to CloudWatch Logs), per stage, with the
    EMF metric values and series in it."""

    def __init__(self, stage_of: Callable[[], str | None]) -> None:
        self.stage_of = stage_of
        self.bytes: Counter[str] = Counter()
        self.metric_values: Counter[str] = Counter()
        self.series: dict[str, set[str]] = {}
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        stage = self.stage_of()
        if stage is None or not line:
            return
        self.bytes[stage] += len(line.encode()) + 1
        if '"_aws"' not in line:
            return
        with contextlib.suppress(ValueError, KeyError, TypeError):
            doc = json.loads(line)
            for directive in doc["_aws"]["CloudWatchMetrics"]:
                dims = [d for group in directive.get("Dimensions", []) for d in group]
                where = ",".join(f"{d}={doc.get(d)}" for d in dims)
                for metric in directive["Metrics"]:
                    value = doc.get(metric["Name"])
                    self.metric_values[stage] += len(value) if isinstance(value, list) else 1
                    self.series.setdefault(stage, set()).add(
                        f"{directive['Namespace']}/{metric['Name']}[{where}]"
                    )


class _LambdaJson(logging.Formatter):
    """Lambda's JSON log format for the stdlib loggers' lines (ApplicationLogLevel INFO)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "timestamp": self.formatTime(record),
                "level": record.levelname,
                "message": record.getMessage(),
                "logger": record.name,
                "requestId": "00000000-0000-0000-0000-000000000000",
            }
        )


# ---------------------------------------------------------------- the workload


WORDS = tuple(
    " ".join(
        (
            "the deploy plan for friday needs a second look before we ship it to the team and I want the",
            "numbers on cost latency and errors from last week plus a short note on what changed in the",
            "billing service my manager asked about the migration timeline and whether the database can",
            "move without downtime we also talked about lunch options near the office on thursday",
        )
    ).split(" ")
)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


@dataclass
class Script:
    """What the fake chat model does for each user message: an action, then a reply."""

    rng: random.Random
    plan: dict[str, str] = field(default_factory=dict)  # user text -> action
    tool_calls: Counter[str] = field(default_factory=Counter)
    reached: set[str] = field(default_factory=set)  # the user messages the model saw

    def message(self, session: int, turn: int) -> str:
        action = self.rng.choices([a for a, _ in MIX], weights=[w for _, w in MIX])[0]
        text = f"[s{session} t{turn}] {_text(self.rng, self.rng.randint(12, 40))}"
        self.plan[text] = action
        return text

    def chat(self, request: Any) -> Any:
        from shared.models import ToolCall, ToolResultMessage, UserMessage
        from shared.providers.base import ToolCallEvent

        last = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
        question = str(request.messages[last].content)
        answered = any(isinstance(m, ToolResultMessage) for m in request.messages[last:])
        action = next((a for text, a in self.plan.items() if text in question), "plain")
        rng = random.Random(question)  # noqa: S311 - made-up text, not a secret
        self.reached.add(question)
        if action == "plain" or answered:
            return _text(rng, rng.randint(40, 120))
        args: dict[str, Any] = {
            "memory_search": {"query": " ".join(rng.sample(WORDS, 3))},
            "memory_store": {
                "predicate": f"preference {rng.randint(1, 40)}",
                "object": " ".join(rng.sample(WORDS, 2)),
                "category": "preference",
            },
            "memory_recall": {"topic": "me"},
            "current_time": {"timezone": "Europe/Paris"},
        }[action]
        self.tool_calls[action] += 1
        return [
            ToolCallEvent(
                call=ToolCall(id=f"c-{rng.randint(0, 10**9)}", name=action, arguments=json.dumps(args))
            )
        ]

    @staticmethod
    def consolidate(request: Any) -> str:
        from shared.consolidation.extraction import EXTRACTION_SYSTEM

        said = str(request.messages[-1].content) if request.messages else ""
        rng = random.Random(said)  # noqa: S311 - made-up text, not a secret
        if request.system == EXTRACTION_SYSTEM:
            preferences = [{"key": f"topic {rng.randint(1, 30)}", "value": " ".join(rng.sample(WORDS, 2))}]
            return json.dumps({"preferences": preferences, "entities": []})
        return _text(rng, rng.randint(80, 160))


def _context(name: str, timeout_s: float, memory_mb: int) -> Any:
    from shared.local.lambda_runtime import InvocationContext

    return InvocationContext(
        function_name=name,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
        memory_limit_in_mb=memory_mb,
        aws_request_id=f"bench-{time.monotonic_ns()}",
        deadline=time.monotonic() + timeout_s,
    )


@dataclass
class Run:
    """One workload's raw measurements."""

    turns: int
    meter: Meter
    search: SearchLog
    logs: LogCapture
    invocations: dict[str, list[Invocation]]  # per stage
    chat_calls: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    reached: set[str] = field(default_factory=set)  # the user messages the model saw
    replies: int = 0
    stored_bytes: int = 0
    ltm_records: int = 0
    http: list[int] = field(default_factory=list)  # each HTTP API request's bytes in + out
    # The consolidation model's prompt and answer characters, per stage
    model_chars_in: Counter[str] = field(default_factory=Counter)
    model_chars_out: Counter[str] = field(default_factory=Counter)
    extractions: Counter[str] = field(default_factory=Counter)  # per-turn extraction's statuses
    rounds: int = 0
    quiet_rounds: int = 0  # rounds followed by the debounce's quiet: their turns' events extract


class Workload:
    """The workload through the real handlers on moto and osmem-server (the module's docstring)."""

    def __init__(self, functions: Mapping[str, FunctionConfig], seed: int) -> None:
        from shared.providers.function import FunctionProvider

        self.functions = functions
        self.seed = seed
        self.stage: str | None = None  # the invocation running now, read by every counter
        self.script = Script(random.Random(seed))  # noqa: S311 - made-up text, not a secret
        self.chat = FunctionProvider(self.script.chat)
        self.summariser = FunctionProvider(self._consolidate)
        self.model_chars_in: Counter[str] = Counter()
        self.model_chars_out: Counter[str] = Counter()
        self.extractions: Counter[str] = Counter()
        # Both answer as the listed model MODEL, so the workspace's default budget charges their
        # calls at its price ("function/..." is unknown and would be priced at the dearest model's).
        self.chat.name = self.summariser.name = MODEL.split("/", maxsplit=1)[0]
        self.invocations: dict[str, list[Invocation]] = {}
        self.http: list[int] = []
        self.search = SearchLog()
        self.logs = LogCapture(self.current)

    def current(self) -> str | None:
        return self.stage

    def _consolidate(self, request: Any) -> str:
        """Script.consolidate, its prompt's and answer's characters counted for the stage asking."""
        answer = Script.consolidate(request)
        stage = self.stage or "other"
        said = [request.system or "", *(str(getattr(m, "content", "") or "") for m in request.messages)]
        self.model_chars_in[stage] += sum(len(x) for x in said)
        self.model_chars_out[stage] += len(answer)
        return answer

    def stand_ins(self, stack: ExitStack) -> Any:
        """moto, osmem-server and the stack's resources, the functions' environment in this
        process, and every counter in place: the resources."""
        import boto3

        from shared.channels import web
        from shared.config import PROVIDER_KEY_SECRETS, Settings
        from shared.local import aws_mode

        stack.enter_context(aws_mode.fifo_redelivery_in_order())
        moto = aws_mode.start_moto("127.0.0.1")
        stack.callback(moto.stop)
        host, port = moto.get_host_and_port()
        osmem = aws_mode.start_osmem()
        stack.callback(osmem.close)
        settings = Settings()
        resources = aws_mode.provision(
            f"http://{host}:{port}",
            aws_mode.DEFAULT_REGION,
            opensearch_endpoint=osmem.url,
            secrets_prefix=settings.secrets_prefix,
            max_receive_count=settings.lane_max_attempts,
            visibility_timeout_s=60,
        )
        secrets = aws_mode.aws_client("secretsmanager", resources.endpoint, resources.region)
        secrets.create_secret(
            Name=resources.secrets_prefix + web.secret_name(WORKSPACE), SecretString=SIGNING_SECRET
        )
        secrets.create_secret(
            Name=resources.secrets_prefix + PROVIDER_KEY_SECRETS["openai_api_key"], SecretString=OPENAI_KEY
        )
        # The functions' environment as the stack sets it (metrics on, INFO logs), in this process.
        env = {
            "POWERTOOLS_METRICS_DISABLED": "false",
            "POWERTOOLS_METRICS_NAMESPACE": "Sigil",
            "POWERTOOLS_LOG_LEVEL": "INFO",
            # A listed model, so the default budget charges the turns at its price (an unknown
            # model is priced at the dearest, which would exhaust a user's daily budget mid-run).
            "SIGIL_MODEL": MODEL,
            "SIGIL_EMBEDDING_MODEL": "none",
        }
        stack.enter_context(mock.patch.dict(os.environ, env))
        os.environ.update(aws_mode.function_env(resources, "agent", settings) | env)
        os.environ.pop("OPENAI_API_KEY", None)  # read from Secrets Manager, as in the cloud

        self.meter = Meter(
            aws_mode.aws_client("dynamodb", resources.endpoint, resources.region), self.current
        )
        # A session of the run's own, whose hooks end with it (later boto3 users get the one before).
        stack.callback(setattr, boto3, "DEFAULT_SESSION", boto3.DEFAULT_SESSION)
        boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        # Registered before any handler builds a client: a client copies the session's hooks.
        self.meter.attach(boto3.DEFAULT_SESSION.events)
        self._models(stack)
        self._capture(stack)
        return resources

    def _models(self, stack: ExitStack) -> None:
        """The fake chat and consolidation models in the functions' runtime objects."""
        from shared import cloud
        from shared.adapters.aws import clients
        from shared.consolidation.compaction import ConsolidationModel

        clients.reset()
        cloud.reset()
        real_turn_deps, real_consolidator = cloud.turn_deps, cloud.consolidator
        chat, model = self.chat, ConsolidationModel(self.summariser, MODEL.split("/")[1])

        @functools.cache
        def turn_deps() -> Any:
            return dataclasses.replace(
                real_turn_deps(), provider_factory=lambda ref: (chat, MODEL.split("/")[1])
            )

        @functools.cache
        def consolidator() -> Any:
            backend, _ = real_consolidator()
            return backend, lambda: model

        stack.enter_context(mock.patch.object(cloud, "turn_deps", turn_deps))
        stack.enter_context(mock.patch.object(cloud, "consolidator", consolidator))
        stack.callback(cloud.reset)

    def _capture(self, stack: ExitStack) -> None:
        """OpenSearch requests, stdout (powertools' lines, EMF) and the stdlib loggers' lines."""
        from shared.observability import logger

        stack.enter_context(self.search.counting(self.current))
        stack.enter_context(contextlib.redirect_stdout(self.logs))
        stack.enter_context(mock.patch.object(logger.logger_handler, "stream", self.logs))
        # powertools warns when an invocation emits no metric of its own (an outbox GET): noise here.
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        logger.setLevel("INFO")
        handler = logging.StreamHandler(self.logs)
        handler.setFormatter(_LambdaJson())
        for name in ("shared", "functions"):
            stdlib = logging.getLogger(name)
            stdlib.addHandler(handler)
            stack.callback(stdlib.removeHandler, handler)
            stack.enter_context(mock.patch.object(stdlib, "level", logging.INFO))

    def invoke(self, name: str, fn: Callable[[dict[str, Any], Any], Any], event: dict[str, Any]) -> Any:
        """One invocation of a handler, timed: wall and thread CPU, less the counting hooks'."""
        config = self.functions[FUNCTION_OF[name]]
        context = _context(f"sigil-{FUNCTION_OF[name]}", config.timeout_s, config.memory_mb)
        calls = len(self.chat.requests) + len(self.summariser.requests)
        wall, cpu = dict(self.meter.overhead_s), dict(self.meter.overhead_cpu_s)
        self.stage = name
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(event, context)
        finally:
            elapsed = time.perf_counter() - start - _longest(self.meter.overhead_s, wall)
            # This thread's CPU: its own hooks' CPU off it (the workers' CPU is not in it either).
            me = threading.get_ident()
            used = time.thread_time() - start_cpu - (self.meter.overhead_cpu_s[me] - cpu.get(me, 0.0))
            self.stage = None
            made = len(self.chat.requests) + len(self.summariser.requests) - calls
            self.invocations.setdefault(name, []).append(
                Invocation(FUNCTION_OF[name], elapsed * 1000, made, cpu_ms=used * 1000)
            )

    def post(self, session: str, text: str, event_id: str) -> None:
        """A signed web-channel POST through the webhook."""
        from functions.webhook import handler as webhook
        from shared.channels import web
        from shared.local import aws_mode

        body = json.dumps({"event_id": event_id, "session": session, "user": session, "text": text}).encode()
        headers = [("content-type", "application/json"), ("host", "api.example.com")]
        headers += list(web.signed_headers(SIGNING_SECRET, body).items())
        event = aws_mode.http_api_event(
            route_key=aws_mode.POST_WEB,
            method="POST",
            raw_path=f"/webhooks/web/{WORKSPACE}",
            raw_query="",
            headers=headers,
            body=body,
            path_parameters={"workspace": WORKSPACE},
        )
        answer = self.invoke("webhook", webhook.lambda_handler, event)
        if answer["statusCode"] != 202:
            raise SystemExit(f"the webhook refused the bench's event: {answer}")
        self.http.append(_request_bytes(event) + len(str(answer.get("body", ""))))

    def fetch(self, session: str, after: int) -> list[dict[str, Any]]:
        """The web client's signed GET of the session's outbox, through the webhook."""
        from functions.webhook import handler as webhook
        from shared.channels import web
        from shared.local import aws_mode

        target = f"/sessions/{WORKSPACE}/{session}/outbox?after={after}"
        signed = web.signed_headers(SIGNING_SECRET, target.encode())
        event = aws_mode.http_api_event(
            route_key=aws_mode.GET_OUTBOX,
            method="GET",
            raw_path=f"/sessions/{WORKSPACE}/{session}/outbox",
            raw_query=f"after={after}",
            headers=[("host", "api.example.com"), *signed.items()],
            body=b"",
            path_parameters={"workspace": WORKSPACE, "session": session},
        )
        answer = self.invoke("webhook", webhook.lambda_handler, event)
        if answer["statusCode"] != 200:
            raise SystemExit(f"the outbox GET failed: {answer}")
        self.http.append(_request_bytes(event) + len(str(answer.get("body", ""))))
        replies: list[dict[str, Any]] = json.loads(answer["body"])["replies"]
        return replies

    def extract(self, event: dict[str, Any]) -> Any:
        """One batch of the extraction queue through the consolidate function, its statuses kept."""
        from functions.consolidate import handler as consolidate

        answer = self.invoke("extract", consolidate.lambda_handler, event)
        for result in answer.get("extractions", []) if isinstance(answer, dict) else []:
            self.extractions[str(result.get("status"))] += 1
        return answer

    def drain(self, poller: Any, watch: Any, queue_url: str, *, timeout_s: float = 120.0) -> None:
        """The extraction queue's event source once the debounce has passed: wait until SQS
        releases every delayed message (moto keeps DelaySeconds), then hand over batches until none
        is visible. The waiting reads the queue with an uncounted client: Lambda's long polls are
        the floor's (SQS idle polling)."""
        until = time.monotonic() + timeout_s
        while True:
            attributes = watch.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
            )["Attributes"]
            if int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)) == 0:
                break
            if time.monotonic() > until:
                raise SystemExit(f"the extraction queue still holds delayed messages after {timeout_s:.0f} s")
            time.sleep(0.2)
        while poller.poll_once():
            pass

    def run(
        self,
        turns: int,
        sessions: int,
        batch_size: int,
        extraction_batch: int = 10,
        quiet_share: float = QUIET_SHARE,
    ) -> Run:
        from functions.agent import handler as agent
        from functions.consolidate import handler as consolidate
        from shared.local import aws_mode

        with ExitStack() as stack:
            resources = self.stand_ins(stack)
            esm = aws_mode.aws_client("sqs", resources.endpoint, resources.region)
            self.meter.attach(esm.meta.events, "esm")  # Lambda's poller bills its requests to the account
            poller = aws_mode.FifoPoller(
                esm,
                queue_url=resources.queue_url,
                queue_arn=resources.queue_arn,
                region=resources.region,
                invoke=lambda e: self.invoke("agent", agent.lambda_handler, e),
                batch_size=batch_size,
            )
            # EventBridge's rule to the consolidate function (free: no SQS in the cloud, uncounted).
            feed = aws_mode.ConsolidationFeed(
                aws_mode.aws_client("sqs", resources.endpoint, resources.region),
                queue_url=resources.events_queue_url,
                region=resources.region,
                invoke=lambda e: self.invoke("consolidate", consolidate.lambda_handler, e),
                interval_s=1e9,  # the schedule runs once, on its own, below
            )
            # Per-turn extraction's event source on its standard queue (the agent's sends to it
            # are counted as extraction's share too).
            extraction_sqs = aws_mode.aws_client("sqs", resources.endpoint, resources.region)
            self.meter.attach(extraction_sqs.meta.events, "extract")
            self.meter.queue_stages[resources.extraction_queue_url] = "extract"
            extraction = aws_mode.FifoPoller(
                extraction_sqs,
                queue_url=resources.extraction_queue_url,
                queue_arn=resources.extraction_queue_arn,
                region=resources.region,
                invoke=self.extract,
                batch_size=extraction_batch,
            )
            watch = aws_mode.aws_client("sqs", resources.endpoint, resources.region)
            # Which rounds are followed by the debounce's quiet: their turns' events extract, the
            # earlier ones they supersede (delivered with them) do nothing. The last always is.
            quiet = random.Random(f"quiet-{self.seed}")  # noqa: S311 - a workload's shape, not a secret
            rounds = quiet_rounds = 0
            names = [f"user{s:02d}" for s in range(sessions)]
            seen = dict.fromkeys(names, 0)
            replies = 0
            for n in range(turns):
                s = n % sessions
                self.post(names[s], self.script.message(s, n // sessions), f"evt-{n:05d}")
                if s < sessions - 1 and n < turns - 1:
                    continue
                while poller.poll_once():
                    pass
                for who in names[: s + 1]:
                    got = self.fetch(who, seen[who])
                    if got:
                        seen[who] = int(got[-1]["seq"])
                        replies += len(got)
                while feed.poll_once():
                    pass
                rounds += 1
                if n == turns - 1 or quiet.random() < quiet_share:
                    quiet_rounds += 1
                    self.drain(extraction, watch, resources.extraction_queue_url)
            left = watch.get_queue_attributes(QueueUrl=resources.extraction_queue_url, AttributeNames=["All"])
            held = sum(int(v) for k, v in left["Attributes"].items() if k.startswith("ApproximateNumberOf"))
            if held:
                raise SystemExit(f"{held} TurnCommitted events were not handled (a failed extraction?)")
            self.invoke("schedule", consolidate.lambda_handler, aws_mode.schedule_event(resources.region))
            if self.meter.errors:
                raise SystemExit("counting failed:\n  " + "\n  ".join(self.meter.errors[:10]))
            # Every turn must have reached the model: a budget refusal or an apology is a reply too.
            if replies != turns or len(self.script.reached) != turns:
                raise SystemExit(
                    f"{turns} turns sent, {replies} replies read back, "
                    f"{len(self.script.reached)} reached the model"
                )
            stored, records = _table_contents(
                self.meter.raw, [resources.sessions_table, resources.memory_table]
            )
        return Run(
            turns=turns,
            meter=self.meter,
            search=self.search,
            logs=self.logs,
            invocations=self.invocations,
            http=self.http,
            chat_calls=len(self.chat.requests),
            model_chars_in=self.model_chars_in,
            model_chars_out=self.model_chars_out,
            extractions=self.extractions,
            rounds=rounds,
            quiet_rounds=quiet_rounds,
            tool_calls=self.script.tool_calls,
            replies=replies,
            stored_bytes=stored,
            ltm_records=records,
        )


def run_workload(
    turns: int,
    sessions: int,
    functions: Mapping[str, FunctionConfig],
    *,
    batch_size: int = 10,
    extraction_batch: int = 10,
    quiet_share: float = QUIET_SHARE,
    seed: int = 7,
) -> Run:
    return Workload(functions, seed).run(turns, sessions, batch_size, extraction_batch, quiet_share)


def _request_bytes(event: Mapping[str, Any]) -> int:
    """An HTTP API request's size as the client sent it: path, query, headers and body."""
    headers = sum(len(k) + len(v) + 4 for k, v in event.get("headers", {}).items())
    line = len(event["rawPath"]) + len(event.get("rawQueryString", "")) + 16
    return line + headers + len(str(event.get("body", "")).encode())


def _table_contents(raw: Any, tables: Sequence[str]) -> tuple[int, int]:
    """Bytes stored (items, DynamoDB's 100 bytes of overhead each, and their copies in indexes that
    project everything) and the long-term records (summaries and facts) among them."""
    stored = records = 0
    for table in tables:
        description = raw.describe_table(TableName=table)["Table"]
        indexes = [
            [k["AttributeName"] for k in i["KeySchema"]]
            for i in description.get("GlobalSecondaryIndexes", [])
            if i["Projection"]["ProjectionType"] == "ALL"
        ]
        for page in raw.get_paginator("scan").paginate(TableName=table):
            for item in page["Items"]:
                size = item_size(item) + 100
                stored += size * (1 + sum(all(k in item for k in keys) for keys in indexes))
                sk = str(item.get("sk", {}).get("S", ""))
                records += sk == "SUMMARY" or sk.startswith("TRIPLE#")
    return stored, records


def usage_of(run: Run, stages: Sequence[str], turns: int) -> Usage:
    """The run's measurements for some stages, as a Usage over `turns` turns."""
    calls = [c for c in run.meter.calls if c.stage in stages]
    usage = Usage(turns=turns)
    for name in stages:
        usage.invocations += run.invocations.get(name, [])
        usage.log_bytes[FUNCTION_OF.get(name, name)] += run.logs.bytes[name]
        usage.metric_values += run.logs.metric_values[name]
        usage.metric_series |= run.logs.series.get(name, set())
        usage.embedding_chars += run.search.embedding_chars[name]
        usage.model_chars_in += run.model_chars_in[name]
        usage.model_chars_out += run.model_chars_out[name]
        usage.retrievals += run.search.searches[name] if name == "agent" else 0
    if "webhook" in stages:
        usage.http_requests = list(run.http)
    for c in calls:
        usage.calls[c.name] += 1
        usage.call_bytes[c.name] += c.request_bytes + c.response_bytes
        usage.dynamodb_rru += c.rru
        usage.dynamodb_wru += c.wru
        if c.name.startswith("sqs."):
            (usage.sqs_standard_payloads if c.standard else usage.sqs_payloads).append(c.payload_bytes)
        usage.event_sizes += c.event_sizes
        usage.secrets_calls += c.name.startswith("secretsmanager.")
        usage.retrievals += c.fact_read and c.stage == "agent"
    for stage, kind, *_ in run.search.requests:
        if stage in stages:
            usage.opensearch[kind] += 1
    if "agent" in stages:
        # One AgentCore event per message a turn keeps: the user's, each model answer and each
        # tool result, 2 per model call (docs/cost.md).
        usage.messages_stored = 2 * run.chat_calls
        usage.ltm_records = run.ltm_records
        usage.dynamodb_stored_bytes = run.stored_bytes
    return usage


# ---------------------------------------------------------------- the stack


def synth_stages(stages: Sequence[str] = ("dev", "team", "prod")) -> dict[str, dict[str, Any]]:
    """Each stage's CloudFormation template, synthesised offline as tests/infra does, in a child
    interpreter: jsii's node process ends with it instead of outliving the bench."""
    code = "\n".join(
        (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})",
            "from bench import cost",
            f"cost.synth_here({list(stages)!r})",
        )
    )
    # JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION takes the node major versions not to warn about.
    env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18,20"}
    out = subprocess.run(  # noqa: S603 - this interpreter, running the fixed code above
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"synthesising {', '.join(stages)} failed:\n{out.stderr[-4000:]}")
    templates: dict[str, dict[str, Any]] = json.loads(out.stdout)
    return templates


def synth_here(stages: Sequence[str]) -> None:
    """synth_stages' child: the templates as one JSON object on stdout (nothing else goes there)."""
    from infra.constructs.function import LAYER_MANIFEST, PYTHON_VERSION
    from tests.infra.helpers import synthesize

    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        layer = Path(tmp) / "layer"
        (layer / "python").mkdir(parents=True)
        (layer / LAYER_MANIFEST).write_text(
            json.dumps({"python_version": PYTHON_VERSION, "lock_sha256": "0" * 64})
        )
        for stage in stages:
            out[stage] = synthesize(stage, Path(tmp) / f"cdk-{stage}", layer).raw
    print(json.dumps(out))


@dataclass(frozen=True)
class EventSource:
    """An SQS event-source mapping of the template: its queue's kind and its BatchSize."""

    queue: str  # the queue's logical id
    fifo: bool
    batch_size: int


def event_sources(template: Mapping[str, Any]) -> list[EventSource]:
    """The template's SQS event-source mappings (Lambda's default BatchSize, 10, if one sets none)."""
    resources = template["Resources"]
    found = []
    for resource in resources.values():
        if resource["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        props = resource["Properties"]
        arn = props.get("EventSourceArn")
        queue = str(arn["Fn::GetAtt"][0]) if isinstance(arn, dict) and "Fn::GetAtt" in arn else ""
        kind = resources.get(queue, {})
        fifo = bool(kind.get("Properties", {}).get("FifoQueue")) if kind else True
        found.append(EventSource(queue, fifo, int(props.get("BatchSize", 10))))
    return found


def batch_size(template: Mapping[str, Any], *, fifo: bool = True) -> int:
    """The BatchSize of the mapping on the FIFO lanes (the agent's) or on the standard queue (the
    extraction's); 10, Lambda's default, when there is none."""
    return next((s.batch_size for s in event_sources(template) if s.fifo == fifo), 10)


def function_configs(template: Mapping[str, Any]) -> dict[str, FunctionConfig]:
    """memorySize, architecture and timeout of the webhook, agent and consolidate functions."""
    found: dict[str, FunctionConfig] = {}
    for logical, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        for name in ("webhook", "agent", "consolidate"):
            if name in logical.lower():
                found[name] = FunctionConfig(
                    memory_mb=int(props.get("MemorySize", 128)),
                    architecture=(props.get("Architectures") or ["x86_64"])[0],
                    timeout_s=float(props.get("Timeout", 3)),
                )
    missing = {"webhook", "agent", "consolidate"} - set(found)
    if missing:
        raise SystemExit(f"the stack has no function for {sorted(missing)}")
    return found


# ---------------------------------------------------------------- report


def money(usd: float) -> str:
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


@dataclass
class Report:
    turns: int
    sessions: int
    usage: Usage
    schedule: Usage
    functions: dict[str, FunctionConfig]
    templates: dict[str, dict[str, Any]]
    prices: dict[str, Any]
    run: Run
    seconds: float = 0.0
    # The consolidation model's list price, USD per 1M tokens in and out (shared.budgets')
    model_per_mtok: tuple[float, float] = (0.0, 0.0)
    quiet_share: float = QUIET_SHARE

    def per_thousand(self, wait_s: float, stages: Sequence[str] | None = None) -> list[Line]:
        """Table (a)'s lines, per 1,000 turns: every stage of the turns, or only `stages`."""
        usage = self.usage if stages is None else usage_of(self.run, stages, self.usage.turns)
        lines = price_usage(usage, self.functions, self.prices, wait_s, self.model_per_mtok)
        return scaled(lines, 1000 / self.usage.turns)

    def agentcore(self) -> list[Line]:
        return scaled(agentcore_lines(self.usage, self.prices), 1000 / self.usage.turns)

    def floors(self) -> dict[str, list[Line]]:
        return {
            stage: floor_lines(template, self.prices, self.schedule, function_configs(template))
            for stage, template in self.templates.items()
        }

    def _turns_table(self) -> tuple[list[str], list[Line]]:
        """Table (a) with per-turn extraction's share, and the lines at the shorter wait."""
        out: list[str] = []
        short, long = (self.per_thousand(w) for w in (WAITS_S[0], WAITS_S[-1]))
        ext_short, ext_long = (
            {x.item: x for x in self.per_thousand(w, EXTRACTION_STAGES)} for w in (WAITS_S[0], WAITS_S[-1])
        )
        rows = []
        for a, b in zip(short, long, strict=True):
            basis = a.basis if a.basis == b.basis else f"{a.basis} | {b.basis}"
            ea, eb = ext_short.get(a.item), ext_long.get(b.item)
            share = f"{money(ea.usd)} | {money(eb.usd)}" if ea and eb and (ea.usd or eb.usd) else "-"
            rows.append([a.item, basis, money(a.usd), money(b.usd), share])
        totals = [sum(x.usd for x in short), sum(x.usd for x in long)]
        extraction = [sum(x.usd for x in ext_short.values()), sum(x.usd for x in ext_long.values())]
        rows.append(
            [
                "total",
                "",
                money(totals[0]),
                money(totals[1]),
                f"{money(extraction[0])} | {money(extraction[1])}",
            ]
        )
        rows.append(
            [
                "total without per-turn extraction",
                "",
                money(totals[0] - extraction[0]),
                money(totals[1] - extraction[1]),
                "",
            ]
        )
        waits = [f"{w:g} s wait" for w in (WAITS_S[0], WAITS_S[-1])]
        out.append(
            text_table(
                ["line item", "quantity per 1,000 turns", *waits, "of which per-turn extraction"], rows
            )
        )
        statuses = ", ".join(f"{count} {status}" for status, count in self.run.extractions.most_common())
        out.append(
            f"  per-turn extraction: {self.run.quiet_rounds} of {self.run.rounds} rounds followed by the "
            f"debounce's quiet (share asked {self.quiet_share:g}); TurnCommitted events: {statuses or 'none'}"
        )
        return out, short

    def render(self) -> str:
        n = self.usage.turns
        out = [
            "",
            f"What 1,000 turns cost on AWS (bench/cost.py): {self.turns} turns, {self.sessions} sessions, "
            f"measured on moto, scaled to 1,000; list prices of bench/prices.json (us-east-1)",
            "",
            "(a) $ per 1,000 turns, without the chat model's own price, at 3 s and 15 s of wait a model call",
        ]
        turns_table, short = self._turns_table()
        out += turns_table
        mine = {f: [i for i in self.usage.invocations if i.function == f] for f in self.functions}
        own = {f: sum(i.own_ms for i in calls) / n for f, calls in mine.items()}
        cpu = {f: sum(i.cpu_ms for i in calls) / n for f, calls in mine.items()}
        model_calls = sum(i.model_calls for i in self.usage.invocations if i.function == "agent") / n
        tools = ", ".join(f"{count} {tool}" for tool, count in self.run.tool_calls.most_common())
        out.append(
            "  own work per turn, wall (CPU): "
            + ", ".join(f"{f} {own[f]:.0f} ms ({cpu[f]:.0f})" for f in self.functions)
            + f"; {model_calls:.2f} model calls a turn; tools called: {tools}"
        )
        parts = {
            "webhook": ("webhook",),
            "agent": ("agent", "esm"),
            "consolidation": ("consolidate",),
            "per-turn extraction": EXTRACTION_STAGES,
        }
        shares = {
            part: [sum(x.usd for x in self.per_thousand(w, stages)) for w in (WAITS_S[0], WAITS_S[-1])]
            for part, stages in parts.items()
        }
        out.append(
            "  by function, everything it calls included (3 s | 15 s): "
            + ", ".join(f"{part} {money(a)} | {money(b)}" for part, (a, b) in shares.items())
        )
        memory = sum(x.usd for x in short if x.item.startswith(("DynamoDB", "Bedrock Titan")))
        core = self.agentcore()
        out += ["", "(b) the same turns' memory at Amazon Bedrock AgentCore Memory's published fees"]
        rows = [[x.item, x.basis, money(x.usd)] for x in core]
        rows.append(["total, AgentCore Memory", "", money(sum(x.usd for x in core))])
        rows.append(
            ["ours: DynamoDB and embeddings, from (a)", "OpenSearch: in the floor (c)", money(memory)]
        )
        out.append(text_table(["per 1,000 turns", "quantity", "$"], rows))
        floors = self.floors()
        out += [
            "",
            "(c) each stage's monthly floor with nothing running (its synthesised template's resources)",
        ]
        items = list(dict.fromkeys(x.item for lines in floors.values() for x in lines))
        rows = []
        for item in items:
            row = [item]
            for lines in floors.values():
                hit = next((x for x in lines if x.item == item), None)
                row.append(f"{money(hit.usd)} ({hit.basis})" if hit else "-")
            rows.append(row)
        rows.append(["total per month", *(money(sum(x.usd for x in lines)) for lines in floors.values())])
        out.append(text_table(["line item", *floors], rows))
        series = len(self.usage.metric_series | self.schedule.metric_series)
        metric = _usd(self.prices, "cloudwatch_custom_metric")
        out.append(
            f"  and once traffic flows: {series} custom metric series in the EMF lines x {money(metric)} "
            f"= {money(series * metric)} a month (more with more workspaces and channels as dimensions)"
        )
        out += ["", "(d) measured per turn: AWS calls (bytes in + out per call), OpenSearch requests, logs"]
        rows = [
            [name, f"{count / n:.2f}", f"{self.usage.call_bytes[name] / count:,.0f}"]
            for name, count in sorted(self.usage.calls.items())
        ]
        rows += [
            [f"opensearch {kind}", f"{count / n:.2f}", ""]
            for kind, count in sorted(self.usage.opensearch.items())
        ]
        rows += [
            [f"log bytes, {fn}", f"{b / n:,.0f}", ""] for fn, b in sorted(self.usage.log_bytes.items()) if b
        ]
        rows.append(["EMF metric values", f"{self.usage.metric_values / n:.1f}", ""])
        rows.append(
            [
                "DynamoDB RRU / WRU",
                f"{self.usage.dynamodb_rru / n:.2f} / {self.usage.dynamodb_wru / n:.2f}",
                "",
            ]
        )
        out.append(text_table(["per turn", "count", "bytes/call"], rows))
        media = media_lines(self.prices)
        out += [
            "",
            "(e) media messages (docs/media.md): per 1,000 fetched files of 500 KB kept 30 days, read once",
        ]
        rows = [[x.item, x.basis, money(x.usd)] for x in media]
        rows.append(["total", "", money(sum(x.usd for x in media))])
        out.append(text_table(["per 1,000 files", "quantity", "$"], rows))
        out.append(
            f"\n({self.seconds:.0f} s; prices taken {_dates(self.prices)}: check them against the pages "
            "bench/prices.json names before quoting a figure)"
        )
        return "\n".join(out)


def _dates(prices: Mapping[str, Any]) -> str:
    dates = sorted({str(p["taken"]) for p in prices.values()})
    return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"


def consolidation_price(model: str = MODEL) -> tuple[float, float]:
    """The consolidation model's list price, USD per 1M tokens in and out: the one its budget
    charges (shared.budgets)."""
    from shared.budgets import DEFAULT_PRICES

    price = DEFAULT_PRICES[model]
    return float(price.input_per_mtok), float(price.output_per_mtok)


def measure(
    turns: int,
    sessions: int,
    *,
    stages: Sequence[str] = ("dev", "team", "prod"),
    quiet_share: float = QUIET_SHARE,
) -> Report:
    started = time.monotonic()
    templates = synth_stages(stages)
    template = templates[stages[0]]
    functions = function_configs(template)
    run = run_workload(
        turns,
        sessions,
        functions,
        batch_size=batch_size(template),
        extraction_batch=batch_size(template, fifo=False),
        quiet_share=quiet_share,
    )
    usage = usage_of(run, TURN_STAGES, turns)
    schedule = usage_of(run, ("schedule",), 1)
    report = Report(turns, sessions, usage, schedule, functions, templates, load_prices(), run)
    report.model_per_mtok = consolidation_price()
    report.quiet_share = quiet_share
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=500, help="turns measured (the table is per 1,000)")
    parser.add_argument("--sessions", type=int, default=10, help="sessions the turns are dealt across")
    parser.add_argument(
        "--quiet-share",
        type=float,
        default=QUIET_SHARE,
        help="share of turns followed by the extraction debounce's quiet (1: every turn extracts)",
    )
    parser.add_argument(
        "--prompt-caching-only",
        action="store_true",
        help="print only the prompt-caching table (a 20-turn conversation per provider, ~30 s)",
    )
    args = parser.parse_args(argv)
    from bench import prompt_caching

    if args.prompt_caching_only:
        print(prompt_caching.render(prompt_caching.measure()))
        return
    if args.turns < 1 or not 1 <= args.sessions <= args.turns:
        parser.error("--turns must be at least 1 and --sessions between 1 and --turns")
    if not 0 <= args.quiet_share <= 1:
        parser.error("--quiet-share must be between 0 and 1")
    print(measure(args.turns, args.sessions, quiet_share=args.quiet_share).render())
    # The model's input tokens, which the AWS tables above leave to the model's bill: what prompt
    # caching saves of them (docs/context.md, "Prompt caching").
    print()
    print(prompt_caching.render(prompt_caching.measure()))


if __name__ == "__main__":
    main()
