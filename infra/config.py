"""What differs between stages, read once from CDK context (`-c stage=dev|prod`, ...).

Everything else about the stack is the same in every stage, so a dev deploy exercises the same
wiring as prod; only sizes, retention and what happens to data on stack deletion change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Node

from shared.config import KEY_PROVIDERS as SETTINGS_KEY_PROVIDERS
from shared.models import ID_PATTERN

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAYER_DIR = ROOT / "layers" / "build"
# Titan Text Embeddings v2 (1024 dimensions): in the stack's region, no key to manage.
DEFAULT_EMBEDDING_MODEL = "bedrock/amazon.titan-embed-text-v2:0"
# The providers reached with an API key (a secret under llm/); Bedrock is granted per model instead.
KEY_PROVIDERS = tuple(SETTINGS_KEY_PROVIDERS)


@dataclass(frozen=True)
class Throttle:
    """An HTTP API route's steady rate (requests per second) and burst (its token bucket's size)."""

    rate: float
    burst: int


@dataclass(frozen=True)
class Caps:
    """How much the stack lets run at once: what bounds the spend when budgets do not
    (docs/deploy.md#cost-caps gives what they cost at most per day)."""

    # The agent's SQS event source runs at most this many batches at once (its maximum
    # concurrency; 2 is the least Lambda allows). Each batch runs its turns one after another.
    agent_concurrency: int = 5
    # Reserved concurrency per function, None for none. The agent's, when set, equals its event
    # source's maximum: less would throttle the event source, and each throttled delivery counts
    # towards the lane's maxReceiveCount (a turn dead-lettered without having run).
    agent_reserved: int | None = 5
    webhook_reserved: int | None = 10
    consolidate_reserved: int | None = 2
    # Every route of the HTTP API, and, tighter, each POST route that queues a turn.
    api: Throttle = Throttle(rate=50, burst=100)
    turn_routes: Throttle = Throttle(rate=10, burst=20)
    # The FIFO queues the lanes are sharded over by a hash of the session (infra.constructs.lanes),
    # each with its own event source of `agent_concurrency`: one event source runs at most 1,000
    # batches at once. Only ever raised; the queues from `lanes_paused_from` on get their event
    # source disabled while the older queues drain (docs/scale.md#sharded-lanes).
    lanes: int = 1
    lanes_paused_from: int | None = None
    # The memory index's primary shards and over how many of them a workspace spreads, when the
    # functions create it (SIGIL_OPENSEARCH_SHARDS and _ROUTING_PARTITIONS; docs/scale.md#memory-shards).
    # 1 and 1: OpenSearch's defaults. An index that exists keeps its own.
    memory_shards: int = 1
    memory_routing_partitions: int = 1

    def memory_env(self) -> dict[str, str]:
        """The index sizing's variables for the functions that create the index (none by default)."""
        if self.memory_shards == 1:
            return {}
        return {
            "SIGIL_OPENSEARCH_SHARDS": str(self.memory_shards),
            "SIGIL_OPENSEARCH_ROUTING_PARTITIONS": str(self.memory_routing_partitions),
        }

    @property
    def agent_total(self) -> int:
        """The agent's batches at once over every lane queue (its reserved concurrency when set)."""
        return self.agent_concurrency * self.lanes


# What `-c size=...` starts from, named by the active people the stack is sized for
# (docs/deploy.md#sizes gives each one's assumptions and monthly cost ceiling; docs/scale.md
# what binds next). Each cap's own context value still changes it. "default" is Caps(): a
# protective stack for trying Sigil out, not a sizing.
SIZES: dict[str, Caps] = {
    "default": Caps(),
    # 50 people at a turn each 20 s at peak: 2.5 turns/s, ~15 turns running (6 s a turn).
    "50": Caps(
        agent_concurrency=20,
        agent_reserved=20,
        webhook_reserved=20,
        consolidate_reserved=5,
        api=Throttle(rate=100, burst=200),
        turn_routes=Throttle(rate=25, burst=50),
    ),
    # 500 people: 25 turns/s, ~150 running.
    "500": Caps(
        agent_concurrency=200,
        agent_reserved=200,
        webhook_reserved=50,
        consolidate_reserved=20,
        api=Throttle(rate=300, burst=600),
        turn_routes=Throttle(rate=100, burst=200),
    ),
    # 10,000 people: 500 turns/s, ~3,000 running, over four lane queues of 800 batches each
    # (one event source stops at 1,000). Needs the account's concurrency limit raised to at least
    # 3,500 (3,200 + 100 + 100 reserved, and the 100 Lambda keeps unreserved).
    "10000": Caps(
        agent_concurrency=800,
        agent_reserved=3200,
        webhook_reserved=100,
        consolidate_reserved=100,
        api=Throttle(rate=2000, burst=4000),
        turn_routes=Throttle(rate=1000, burst=2000),
        lanes=4,
    ),
}


@dataclass(frozen=True)
class SearchSizing:
    data_nodes: int
    data_instance: str
    volume_gib: int
    # 0 means no dedicated master nodes; zone awareness needs at least 2 availability zones.
    master_nodes: int = 0
    master_instance: str | None = None
    availability_zones: int = 1


@dataclass(frozen=True)
class StageConfig:
    name: str
    log_retention: logs.RetentionDays
    # What stack deletion does to tables, the search domain's log groups and secrets.
    removal_policy: RemovalPolicy
    search: SearchSizing
    # What the stage's floor pays for besides the domain (docs/cost.md#the-floors). The CloudWatch
    # dashboard ($3 a month): the same metrics are in CloudWatch's own pages without it.
    dashboard: bool = True
    # "all" the alarms, or "essential": only those that mean work is lost or blocked
    # (infra.constructs.observability.ESSENTIAL_ALARMS), $0.10 a month each.
    alarms: Literal["all", "essential"] = "all"
    # The alarm topic under a customer managed key ($1 a month; CloudWatch cannot publish to a
    # topic under the AWS-managed aws/sns key). Without it the topic is not encrypted at rest:
    # it carries alarm names and states, never a message or a secret.
    alarm_topic_key: bool = True
    # Create every catalogue secret at deploy ($0.40 a month each), or only the web signing
    # secrets and the granted providers' API keys; the channels' secrets are then granted by name
    # and created by `sigil secret set --stack` when a channel is set up (infra.constructs.secrets).
    all_secrets: bool = True


STAGES: dict[str, StageConfig] = {
    # A developer's stage, at most $30 a month with nothing running (docs/cost.md#the-floors).
    "dev": StageConfig(
        name="dev",
        log_retention=logs.RetentionDays.TWO_WEEKS,
        removal_policy=RemovalPolicy.DESTROY,
        # The smallest data node OpenSearch Service offers (2 GiB, 1 GiB of heap), at the least
        # gp3 volume (10 GiB): enough for BM25 and lucene k-NN (HNSW in the Java heap) over a
        # developer's memory, about 4 KiB a 1,024-dimension vector.
        search=SearchSizing(data_nodes=1, data_instance="t3.small.search", volume_gib=10),
        dashboard=False,
        alarms="essential",
        alarm_topic_key=False,
        all_secrets=False,
    ),
    # A small team's production (docs/deploy.md#choosing-a-stage): retained data and every
    # alarm as in prod, on a smaller domain.
    "team": StageConfig(
        name="team",
        log_retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.RETAIN,
        # Three data nodes across three zones and no dedicated masters: three master-eligible
        # nodes keep a quorum when one (or its zone) is lost, and every index has a replica.
        search=SearchSizing(
            data_nodes=3,
            data_instance="m7g.large.search",
            volume_gib=20,
            availability_zones=3,
        ),
    ),
    "prod": StageConfig(
        name="prod",
        log_retention=logs.RetentionDays.THREE_MONTHS,
        removal_policy=RemovalPolicy.RETAIN,
        # One data node per zone across three zones, and three dedicated masters, so losing a zone
        # or a master keeps the cluster writable and the index available.
        search=SearchSizing(
            data_nodes=3,
            data_instance="r7g.large.search",
            volume_gib=50,
            master_nodes=3,
            master_instance="m7g.large.search",
            availability_zones=3,
        ),
    ),
}


@dataclass(frozen=True)
class AppContext:
    stage: StageConfig
    layer_dir: Path
    # Each workspace that talks over the web channel has its own signing secret (sigil/web/{id}).
    web_workspaces: tuple[str, ...]
    # SIGIL_MODEL for the agent and the consolidator; None leaves the model unset, and the agent
    # then answers that no model is configured instead of inventing a reply. A "bedrock/<model>"
    # value also gives both functions InvokeModelWithResponseStream on that model alone
    # (infra.constructs.bedrock).
    model: str | None
    # Where the functions look up secrets (SIGIL_SECRETS_PREFIX). Secret names are per account and
    # region, so a second stage in the same account and region needs its own, e.g. "sigil/dev/".
    secrets_prefix: str
    # SIGIL_EMBEDDING_MODEL for the agent and the consolidator (shared.memory.embeddings). A
    # "bedrock/<model>" value also gives both functions bedrock:InvokeModel on that model alone.
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    # Key providers (openai, anthropic) whose key the agent may read besides the one `model` and
    # `embedding_model` use: for workspaces whose own model is of another provider.
    providers: tuple[str, ...] = ()
    caps: Caps = Caps()
    # Where the stage's alarm topic sends e-mail (`-c alarm_email=...`, or `alarmEmail`); None
    # subscribes no one, and the topic still takes other subscriptions (docs/operations.md).
    alarm_email: str | None = None
    # The chat page's origin (`-c web_origin=https://chat.example.com`): the one origin the HTTP
    # API's CORS admits. None admits none (a browser page on another origin cannot call the API).
    web_origin: str | None = None
    # Days the media bucket keeps a file senders attached (`-c media_retention_days=30`;
    # docs/media.md): its lifecycle rule expires the file and its record together.
    media_retention_days: int = 30

    def provider_of(self, ref: str | None) -> str | None:
        provider, slash, model_id = (ref or "").partition("/")
        return provider if slash and provider and model_id else None

    def model_providers(self) -> frozenset[str]:
        """The providers the configured models need: the chat model's, and the embedding model's
        when it is reached with a key (OpenAI's). A Bedrock embedding model is granted on its own
        and leaves Bedrock chat models out. What the consolidator uses (it summarises with
        SIGIL_MODEL, never a workspace's model)."""
        chat, embedding = self.provider_of(self.model), self.provider_of(self.embedding_model)
        return frozenset(p for p in (chat, embedding if embedding in KEY_PROVIDERS else None) if p)

    def agent_providers(self) -> frozenset[str]:
        """What the agent may use: the configured models' providers and the `providers` context."""
        return self.model_providers() | frozenset(self.providers)


def read_context(node: Node) -> AppContext:
    stage_name = str(node.try_get_context("stage") or "dev")
    if stage_name not in STAGES:
        raise ValueError(f"unknown stage {stage_name!r}: use -c stage= with one of {', '.join(STAGES)}")
    layer_dir = Path(str(node.try_get_context("layer_dir") or DEFAULT_LAYER_DIR))
    raw_workspaces = node.try_get_context("web_workspaces") or "default"
    if isinstance(raw_workspaces, str):
        raw_workspaces = raw_workspaces.split(",")
    workspaces = tuple(w.strip() for w in raw_workspaces if w.strip())
    bad = [w for w in workspaces if not re.match(ID_PATTERN, w)]
    if bad or not workspaces:
        raise ValueError(f"web_workspaces must be workspace ids ({ID_PATTERN}), got {raw_workspaces!r}")
    model = node.try_get_context("model")
    secrets_prefix = str(node.try_get_context("secrets_prefix") or "sigil/")
    if not secrets_prefix.startswith("sigil/") or not secrets_prefix.endswith("/"):
        raise ValueError(f"secrets_prefix must start with 'sigil/' and end with '/', got {secrets_prefix!r}")
    raw_providers = node.try_get_context("providers") or ()
    if isinstance(raw_providers, str):
        raw_providers = raw_providers.split(",")
    providers = tuple(sorted({str(p).strip() for p in raw_providers if str(p).strip()}))
    unknown = [p for p in providers if p not in KEY_PROVIDERS]
    if unknown:
        raise ValueError(
            f"providers takes {', '.join(KEY_PROVIDERS)} (the providers reached with an API key), "
            f"got {unknown}: a Bedrock model is granted by -c model=bedrock/<model>"
        )
    return AppContext(
        stage=STAGES[stage_name],
        layer_dir=layer_dir if layer_dir.is_absolute() else ROOT / layer_dir,
        web_workspaces=workspaces,
        model=str(model) if model else None,
        secrets_prefix=secrets_prefix,
        embedding_model=str(node.try_get_context("embedding_model") or DEFAULT_EMBEDDING_MODEL),
        providers=providers,
        caps=read_caps(node),
        alarm_email=read_alarm_email(node),
        web_origin=read_web_origin(node),
        media_retention_days=_int(
            "media_retention_days", node.try_get_context("media_retention_days") or 30, least=1, most=3650
        ),
    )


# scheme://host[:port], as a browser sends it in Origin: no path, no wildcard.
_ORIGIN = re.compile(r"^https://[A-Za-z0-9.-]+(:\d{1,5})?$|^http://(localhost|127\.0\.0\.1)(:\d{1,5})?$")


def read_web_origin(node: Node) -> str | None:
    raw = node.try_get_context("web_origin")
    if raw is None or not str(raw).strip():
        return None
    origin = str(raw).strip().rstrip("/")
    if not _ORIGIN.match(origin):
        raise ValueError(
            f"web_origin must be one origin, https://host[:port] (or http://localhost), got {origin!r}"
        )
    return origin


# Enough to catch a wrong value (a list, a name without a domain); SNS confirms the address itself.
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")


def read_alarm_email(node: Node) -> str | None:
    raw = node.try_get_context("alarm_email") or node.try_get_context("alarmEmail")
    if raw is None or not str(raw).strip():
        return None
    email = str(raw).strip()
    if not _EMAIL.match(email):
        raise ValueError(f"alarm_email must be one e-mail address, got {email!r}")
    return email


# What turns a reservation off: Lambda's own 0 would stop the function, which no one means here.
_OFF = {"none", "off", "0", ""}


def _int(name: str, value: Any, *, least: int, most: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if not least <= number <= most:
        raise ValueError(f"{name} must be between {least} and {most}, got {number}")
    return number


def _reserved(node: Node, name: str, default: int | None) -> int | None:
    value = node.try_get_context(name)
    if value is None:
        return default
    if str(value).strip().lower() in _OFF:
        return None
    return _int(name, value, least=1, most=10_000)


def _throttle(node: Node, name: str, default: Throttle) -> Throttle:
    rate, burst = node.try_get_context(f"{name}_rate"), node.try_get_context(f"{name}_burst")
    return Throttle(
        rate=default.rate if rate is None else float(_int(f"{name}_rate", rate, least=1, most=10_000)),
        burst=default.burst if burst is None else _int(f"{name}_burst", burst, least=1, most=5_000),
    )


def read_size(node: Node) -> Caps:
    """The caps `-c size=50|500|10000` names (Caps() without one)."""
    raw = node.try_get_context("size")
    name = (
        "default"
        if raw is None or not str(raw).strip()
        else str(raw).strip().replace(",", "").replace("_", "")
    )
    if name not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {raw!r}")
    return SIZES[name]


def read_caps(node: Node) -> Caps:
    """The concurrency and throttling caps: the size's (Caps' defaults without one), each changed
    by its context value."""
    default = read_size(node)
    raw_agent = node.try_get_context("agent_concurrency")
    # 2 is the least maximum concurrency an SQS event source takes; 1000 the most.
    agent = (
        default.agent_concurrency
        if raw_agent is None
        else _int("agent_concurrency", raw_agent, least=2, most=1000)
    )
    raw_lanes = node.try_get_context("lanes")
    lanes = default.lanes if raw_lanes is None else _int("lanes", raw_lanes, least=1, most=16)
    raw_paused = node.try_get_context("lanes_paused_from")
    paused = (
        default.lanes_paused_from
        if raw_paused is None or str(raw_paused).strip().lower() in _OFF
        else _int("lanes_paused_from", raw_paused, least=1, most=16)
    )
    if paused is not None and paused >= lanes:
        raise ValueError(f"lanes_paused_from must name a lane queue below lanes={lanes}, got {paused}")
    raw_shards, raw_partitions = (
        node.try_get_context("memory_shards"),
        node.try_get_context("memory_routing_partitions"),
    )
    shards = (
        default.memory_shards if raw_shards is None else _int("memory_shards", raw_shards, least=1, most=1024)
    )
    partitions = (
        default.memory_routing_partitions
        if raw_partitions is None
        else _int("memory_routing_partitions", raw_partitions, least=1, most=1023)
    )
    if partitions > 1 and partitions >= shards:
        # OpenSearch's rule for index.routing_partition_size.
        raise ValueError(
            f"memory_routing_partitions must be below memory_shards ({shards}), got {partitions}"
        )
    caps = Caps(
        agent_concurrency=agent,
        # Reserved is what every lane's event source may run at once: less would throttle them.
        agent_reserved=agent * lanes,
        webhook_reserved=_reserved(node, "webhook_concurrency", default.webhook_reserved),
        consolidate_reserved=_reserved(node, "consolidate_concurrency", default.consolidate_reserved),
        api=_throttle(node, "api", default.api),
        turn_routes=_throttle(node, "webhook", default.turn_routes),
        lanes=lanes,
        lanes_paused_from=paused,
        memory_shards=shards,
        memory_routing_partitions=partitions,
    )
    reserved = node.try_get_context("reserved_concurrency")
    if reserved is not None and str(reserved).strip().lower() in _OFF:
        # For an account without the headroom: Lambda keeps 100 executions unreserved, so the
        # reservations need an account concurrency limit of at least 100 more than their sum.
        caps = replace(caps, agent_reserved=None, webhook_reserved=None, consolidate_reserved=None)
    elif reserved is not None:
        raise ValueError(f"reserved_concurrency takes only none (no reservation at all), got {reserved!r}")
    return caps
