"""Configuration: one pydantic model, validated once, read from SIGIL_* variables.

Nothing reads os.environ at import time; callers build Settings() (cached by `settings()`), and
tests pass their own instance. The environment is read as pydantic-settings' env source reads it
(a prefix, names in any case, JSON for lists and maps, arguments before variables) by a
validator of the model's own: pydantic-settings, with the sources it loads for other uses
(dotenv, argparse, cloud vaults), was 12 ms of every function's cold import for that one thing.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import ipaddress
import json
import os
import types
import typing
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo

ENV_PREFIX = "SIGIL_"


class Settings(BaseModel):
    """Each field from SIGIL_<FIELD> (or the variable its alias names: OPENAI_API_KEY, AWS_REGION,
    SIGIL_CONFIG), in any case; a list or map as JSON. An argument, by name or alias, wins over
    the variable."""

    # validate_default: as pydantic-settings validates them (a default is a setting like any other).
    model_config = ConfigDict(
        extra="ignore", validate_by_name=True, validate_by_alias=True, validate_default=True
    )

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = {_variable(name, info): name for name, info in cls.model_fields.items()}
        given = {names.get(str(key).upper(), key): value for key, value in data.items()}
        read: dict[str, Any] = {}
        for key, value in os.environ.items():
            name = names.get(key.upper())
            if name is not None and name not in given:
                read[name] = _decoded(key, value, cls.model_fields[name])
        return {**read, **given}

    backend: Literal["embedded", "aws"] = "embedded"
    data_dir: Path = Path(".sigil")
    default_workspace: str = "default"
    # The workspace the platform channels (/webhooks/telegram, slack, discord, whatsapp) deliver
    # into; None means default_workspace. A sender's identity is then resolved inside it.
    channel_workspace: str | None = None

    # "provider/model", e.g. "openai/gpt-4.1-mini". Unset means no model is configured, and the
    # gateway says so at start and in every reply instead of inventing an answer.
    model: str | None = None
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    # The longest wait on the network within a model call (connect, the gap between two chunks).
    provider_timeout_s: float = 60.0
    provider_max_retries: int = 2
    # The longest a whole model call may take, connect, every chunk, retries and fallback
    # included (shared.deadline); a stream still running then is cut (DeadlineExceeded).
    provider_deadline_s: float = Field(default=180.0, gt=0)
    # Anthropic: the key (or a base URL for a proxy that holds it), and the max_tokens sent when a
    # request sets none (the Messages API requires one).
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(default=None, validation_alias="ANTHROPIC_BASE_URL")
    anthropic_max_tokens: int = Field(default=4096, ge=1)
    # Bedrock: credentials come from boto3's chain (the Lambda role); the region defaults to
    # AWS_REGION.
    bedrock_region: str | None = None
    # "provider/model" tried when the model's provider keeps failing. When set, retries are made
    # by shared.providers.resilient (provider_max_retries of them, with this backoff) and the
    # SDKs' own retries are turned off; when unset each SDK retries by itself.
    fallback_model: str | None = None
    provider_retry_base_delay_s: float = Field(default=0.5, ge=0)
    provider_retry_max_delay_s: float = Field(default=8.0, ge=0)
    # "provider/model" for consolidation's summaries and fact extraction (a cheap model does);
    # None: the gateway's default model.
    consolidation_model: str | None = None
    # The model providers this process may use, comma-separated ("openai,anthropic"); the stack
    # sets it to the providers whose keys (or Bedrock grant) the function's role holds. A model of
    # another provider (a workspace's own, say) is then refused with a message naming the grant it
    # lacks, and only these providers' keys are read from the secret store. None: no restriction,
    # and the keys read are those of the configured models (key_providers).
    providers: str | None = None
    # Text embeddings for memory (shared.memory.embeddings, docs/memory.md): "auto" (the offline
    # MiniLM on the embedded backend when its packages are installed; none on aws), "none",
    # "local", "openai/<model>" or "bedrock/<model>". None of them is loaded until first used.
    embedding_model: str = "auto"
    # Fewer dimensions than the model's own (text-embedding-3 any, Titan v2 256/512); None: native.
    embedding_dimensions: int | None = Field(default=None, ge=1)

    # Platform API base URLs by channel (JSON in SIGIL_PLATFORM_BASE_URLS), for a proxy or a
    # local stand-in; a channel not listed uses the platform's public API.
    platform_base_urls: dict[str, str] = Field(default_factory=dict)
    # Prices per model ref in USD per 1M tokens, JSON in SIGIL_MODEL_PRICES, e.g.
    # {"openai/gpt-4.1-mini": {"input_per_mtok": 0.4, "output_per_mtok": 1.6}}; they override
    # shared.budgets.DEFAULT_PRICES, and "*" sets the price of models nobody listed.
    model_prices: dict[str, dict[str, Decimal]] = Field(default_factory=dict)
    # What models take besides text (shared.providers.capabilities, docs/media.md): JSON in
    # SIGIL_MODEL_CAPABILITIES, a model ref or fnmatch pattern -> ["image", "audio", "document"],
    # over the built-in table; a model in neither is text only (a photo becomes a note).
    model_capabilities: dict[str, list[str]] = Field(default_factory=dict)
    # Voice notes (shared.providers.transcription): "auto" (OpenAI's gpt-4o-mini-transcribe when
    # an OpenAI key and no OPENAI_BASE_URL are configured), "none", or "openai/<model>" against
    # transcription_base_url (else OPENAI_BASE_URL); the price per minute of audio, when the
    # built-in list prices do not know the model.
    transcription_model: str = "auto"
    transcription_base_url: str | None = None
    transcription_usd_per_min: Decimal | None = Field(default=None, ge=0)

    # Local gateway
    host: str = "127.0.0.1"
    port: int = 8787
    lane_workers: int = 8
    lane_max_attempts: int = 5
    # The longest a local lane worker spends on one turn (every outbound call of the turn is cut
    # there); the cloud's turns are bounded by the agent function's remaining time instead.
    turn_timeout_s: float = Field(default=600.0, gt=0)
    # Agent function: the time kept back from the invocation's remaining time for the batch's
    # apologies (every call of a turn, its reply and commit included, ends before it), and the
    # least time left worth starting a turn with; a turn that cannot start goes back to the queue
    # on its own (shared.agent.batch).
    turn_reserve_s: float = Field(default=20.0, ge=0)
    turn_min_s: float = Field(default=10.0, ge=0)
    # Burst coalescing in the agent (shared.agent.coalesce): a session's consecutive records in
    # one SQS batch, from one sender, run as one turn (texts joined by blank lines).
    coalesce_burst: bool = False
    signature_window_s: int = 300
    max_body_bytes: int = 256 * 1024
    # The origins of the web chat page that may call the web routes from a browser (CORS, and the
    # /ws handshake's Origin), e.g. ["https://chat.example.com"]; JSON in SIGIL_WEB_ORIGINS.
    # Empty: the local gateway's own origin only (http://{host}:{port}, and localhost for 127.0.0.1).
    web_origins: list[str] = Field(default_factory=list)

    # Cloud resources (filled in by the stack's environment)
    sessions_table: str | None = None
    memory_table: str | None = None
    queue_url: str | None = None
    # The lanes' queues in shard order, comma-separated, when the stack shards them (its `lanes`
    # context above 1): the first is queue_url. Unset: queue_url alone (docs/scale.md#sharded-lanes).
    lane_queue_urls: str | None = None
    # The turns queue's dead-letter queue (the stack's DeadLettersQueueUrl output): read by
    # `sigil dlq` on the aws backend only; no function needs it.
    dead_letter_queue_url: str | None = None
    event_bus_name: str | None = None
    # The standard queue that holds each TurnCommitted for the workspace's debounce (DelaySeconds)
    # before the consolidate function extracts the turn's facts. Unset: no per-turn extraction.
    extraction_queue_url: str | None = None
    # Things done later (docs/schedules.md): EventBridge Scheduler's schedule group, the role it
    # sends the lane's messages as, and the lane queue's ARN (its target). Unset: no schedules.
    schedule_group: str | None = None
    schedule_role_arn: str | None = None
    queue_arn: str | None = None
    opensearch_endpoint: str | None = None
    # The memory index's primary shards and routing partition size when the adapter creates it
    # (shared.adapters.aws.opensearch.IndexSizing; docs/scale.md#memory-shards). 1: OpenSearch's
    # defaults. An existing index keeps its own: another sizing is a new index and a reindex.
    opensearch_shards: int = Field(default=1, ge=1, le=1024)
    opensearch_routing_partitions: int = Field(default=1, ge=1, le=1023)
    skills_bucket: str | None = None  # the stack's SkillsBucket; unset: no skills in the cloud
    # The sandbox's compiled-runtime cache (docs/sandbox.md#the-compile-and-its-cache): the bucket
    # the agent reads it from, and the function that alone writes it, asked to when it is empty.
    sandbox_cache_bucket: str | None = None
    sandbox_precompile_function: str | None = None
    # The stack's MediaBucket (docs/media.md): files senders attach. Unset: attachments are not
    # fetched in the cloud (the turn says so to the sender).
    media_bucket: str | None = None
    # The WebSocket API stage's management endpoint (https://{api}.execute-api.{region}.amazonaws.com/{stage}):
    # where the agent posts the web channel's deltas and replies. Unset: the outbox only.
    ws_endpoint: str | None = None
    # The WebSocket API's public wss:// URL, which the chat page served by the webhook connects
    # to (its /config.json). Unset: the page uses its own origin's /ws (the local gateways).
    ws_url: str | None = None
    secrets_prefix: str = "sigil/"
    aws_region: str | None = Field(default=None, validation_alias="AWS_REGION")

    # The declarative configuration (sigil.yaml, docs/configuration.md): its `defaults` fill the
    # model fields above that the environment leaves unset (shared.configuration.file_settings),
    # and `sigil dev` applies its workspaces and routes at start. Absent at the default path: no
    # file; named by SIGIL_CONFIG and absent: an error.
    config_file: Path = Field(default=Path("sigil.yaml"), validation_alias="SIGIL_CONFIG")

    def resolved_channel_workspace(self) -> str:
        return self.channel_workspace or self.default_workspace

    def resolved_model(self) -> str | None:
        """The gateway's default model, or None when no provider is usable."""
        if self.model:
            return self.model
        return None

    def lane_queues(self) -> tuple[str, ...]:
        """The lanes' queues in shard order: lane_queue_urls, else queue_url alone (none unset)."""
        if self.lane_queue_urls:
            return tuple(u.strip() for u in self.lane_queue_urls.split(",") if u.strip())
        return (self.queue_url,) if self.queue_url else ()

    def allowed_providers(self) -> frozenset[str] | None:
        """SIGIL_PROVIDERS as a set, or None when unset (every provider allowed)."""
        if self.providers is None:
            return None
        return frozenset(p.strip() for p in self.providers.split(",") if p.strip())

    def key_providers(self) -> frozenset[str]:
        """The providers whose API keys this process needs from the secret store.

        SIGIL_PROVIDERS when set; otherwise the providers of the configured models: the default,
        the fallback and the consolidation model, and OpenAI for OpenAI embeddings. Only providers
        with a key (PROVIDER_KEY_SECRETS) are returned; Bedrock authorises through the role.
        """
        allowed = self.allowed_providers()
        if allowed is None:
            refs = (self.model, self.fallback_model, self.consolidation_model, self.embedding_model)
            allowed = frozenset(ref.partition("/")[0] for ref in refs if ref and "/" in ref)
        return allowed & KEY_PROVIDERS.keys()

    def local_providers(self) -> frozenset[str]:
        """The providers whose base URL is local (is_local_url): their models run on hardware the
        operator already pays for, so a model no price lists costs nothing there
        (shared.budgets.PriceTable.from_settings)."""
        return frozenset(
            prefix for prefix, name in BASE_URL_SETTINGS.items() if is_local_url(getattr(self, name))
        )


# The providers reached at a base URL of the operator's choosing, and the Settings field holding it.
BASE_URL_SETTINGS = {"openai": "openai_base_url", "anthropic": "anthropic_base_url"}
# Host names that always mean this machine, its container host, or the local network.
_LOCAL_HOSTS = ("localhost", "host.docker.internal", "host.containers.internal")
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")


def _variable(name: str, info: FieldInfo) -> str:
    """The variable a field is read from, upper case."""
    alias = info.validation_alias
    return (alias if isinstance(alias, str) else f"{ENV_PREFIX}{name}").upper()


def _decoded(variable: str, value: str, info: FieldInfo) -> Any:
    """A variable's text as the field takes it: JSON for a list or a map, the text otherwise."""
    if not _structured(info.annotation):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"{variable} must be JSON ({exc})") from None


def _structured(annotation: Any) -> bool:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_structured(arg) for arg in typing.get_args(annotation))
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, (list, dict, set, tuple, BaseModel))


def is_local_url(url: str | None) -> bool:
    """Whether a base URL points at this machine or a private network: an Ollama, vLLM or
    llama.cpp server the operator runs (loopback, RFC 1918 / ULA / link-local addresses, localhost,
    .local / .internal names). Read off the URL, with no DNS lookup: a public host name is never
    local, whatever it resolves to."""
    if not url:
        return False
    host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").lower().rstrip(".")
    if not host:
        return False
    if host in _LOCAL_HOSTS or host.endswith(_LOCAL_SUFFIXES):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


@cache
def settings() -> Settings:
    return Settings()


# Secret names (not values) of the LLM API keys, by the Settings field each one fills.
PROVIDER_KEY_SECRETS = {
    "openai_api_key": "llm/openai-api-key",
    "anthropic_api_key": "llm/anthropic-api-key",
}
OPENAI_KEY_SECRET = PROVIDER_KEY_SECRETS["openai_api_key"]
# The providers reached with an API key, and the Settings field that holds it. The stack grants
# each function the secrets of these it may use (infra/stack.py), nothing else.
KEY_PROVIDERS = {"openai": "openai_api_key", "anthropic": "anthropic_api_key"}


@dataclass(frozen=True)
class SecretSpec:
    key: str
    description: str


# The catalogue of secret names: what the stack creates (infra/constructs/secrets.py) and what
# `sigil secret` accepts. Read by the webhook: what it needs to verify a request before anything
# is queued.
INGRESS_SECRETS = (
    SecretSpec(
        "telegram/webhook-secret", "Telegram: the secret_token given to setWebhook (Sigil chooses it)"
    ),
    SecretSpec("slack/signing-secret", "Slack: the app's Signing Secret (Basic Information page)"),
    SecretSpec("discord/public-key", "Discord: the application's public key (hex), for Ed25519 checks"),
    SecretSpec("whatsapp/app-secret", "WhatsApp: the Meta app secret, for X-Hub-Signature-256"),
    SecretSpec(
        "whatsapp/verify-token", "WhatsApp: the verify token of the webhook handshake (Sigil chooses it)"
    ),
)
# Read by the agent: what it needs to answer on each channel.
CHANNEL_TOKENS = (
    SecretSpec("telegram/bot-token", "Telegram: the bot token from BotFather"),
    SecretSpec("slack/bot-token", "Slack: the bot user OAuth token (xoxb-...)"),
    SecretSpec("discord/bot-token", "Discord: the bot token"),
    SecretSpec("whatsapp/access-token", "WhatsApp: the Cloud API access token"),
)
# Read by the agent and the consolidator, each only its providers' (KEY_PROVIDERS): the LLM
# providers reached with an API key (and OpenAI's embeddings).
LLM_KEY_OF = {
    "openai": SecretSpec(
        PROVIDER_KEY_SECRETS["openai_api_key"], "OpenAI (or an OpenAI-compatible endpoint): the API key"
    ),
    "anthropic": SecretSpec(PROVIDER_KEY_SECRETS["anthropic_api_key"], "Anthropic: the API key"),
}
LLM_KEYS = tuple(LLM_KEY_OF.values())
# Read by the agent: the tools' API keys (web_search's Brave key, WebSearchConfig.api_key_secret's
# default). Each is read at a call, when a workspace turns its tool on; the stack creates them
# with a random value, which the provider refuses until the real key is put in.
TOOL_KEYS = (
    SecretSpec("web-search/brave-api-key", "Brave Search API: the subscription token, for web_search"),
)
# Read when set, never created by the stack: `sigil secret` accepts them too.
OPTIONAL_SECRETS = (
    SecretSpec(
        "whatsapp/phone-number-id", "WhatsApp: the sending phone number id, when a reply carries none"
    ),
)
