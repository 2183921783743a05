"""Model providers: "provider/model" references resolved to a Provider through a registry.

Each provider imports its SDK only when built, so `import shared.providers` stays cheap and a
gateway loads only the SDK of the provider it is configured for.

With SIGIL_FALLBACK_MODEL set, build_provider wraps the model's provider and the fallback's in a
ResilientProvider, which then makes every retry itself (the SDKs' own are turned off, so a call is
never retried by both). Without it, each SDK retries on its own, provider_max_retries times.

Either way a call ends by its deadline (shared.deadline): provider_deadline_s from its
start, or the turn's deadline in scope if that comes first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from shared.config import Settings
from shared.errors import ModelNotConfigured
from shared.providers.base import Provider
from shared.providers.openai import OpenAIProvider
from shared.providers.resilient import ResilientProvider

ProviderBuilder = Callable[[Settings], Provider]

NOT_CONFIGURED = (
    "No model is configured. Set defaults.model in sigil.yaml (docs/configuration.md) or SIGIL_MODEL "
    "(for example openai/gpt-4.1-mini), and OPENAI_API_KEY or OPENAI_BASE_URL for an "
    "OpenAI-compatible server. A running gateway reads them when it starts; sigil commands, each time."
)

# The environment and sigil.yaml are read when a process starts: a change reaches a running gateway
# when it restarts, and a `sigil` command (consolidate, say) the next time it runs.
_WHEN_READ = "A running gateway reads it when it starts; sigil commands, each time."


def _openai(settings: Settings) -> Provider:
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    if not key and not settings.openai_base_url:
        raise ModelNotConfigured(
            "The model uses the openai provider but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set. "
            "Set OPENAI_API_KEY, or OPENAI_BASE_URL for an OpenAI-compatible server. "
            f"{_WHEN_READ}"
        )
    return OpenAIProvider(
        api_key=key,
        base_url=settings.openai_base_url,
        timeout_s=settings.provider_timeout_s,
        max_retries=settings.provider_max_retries,
        deadline_s=settings.provider_deadline_s,
    )


def _anthropic(settings: Settings) -> Provider:
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    if not key and not settings.anthropic_base_url:
        raise ModelNotConfigured(
            "The model uses the anthropic provider but neither ANTHROPIC_API_KEY nor ANTHROPIC_BASE_URL "
            "is set. Set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a proxy that holds the key). "
            f"{_WHEN_READ}"
        )
    from shared.providers.anthropic import AnthropicProvider  # each provider's module when it is built

    return AnthropicProvider(
        api_key=key,
        base_url=settings.anthropic_base_url,
        timeout_s=settings.provider_timeout_s,
        max_retries=settings.provider_max_retries,
        default_max_tokens=settings.anthropic_max_tokens,
        deadline_s=settings.provider_deadline_s,
    )


def _bedrock(settings: Settings) -> Provider:
    region = settings.bedrock_region or settings.aws_region
    if not region:
        raise ModelNotConfigured(
            "The model uses the bedrock provider but no region is set. Set SIGIL_BEDROCK_REGION "
            f"(or AWS_REGION). Credentials come from the AWS role or profile. {_WHEN_READ}"
        )
    # Built now, the client itself only on the first call: boto3 loads when a turn needs it.
    from shared.providers.bedrock import BedrockProvider

    return BedrockProvider(
        region,
        max_attempts=settings.provider_max_retries + 1,
        timeout_s=settings.provider_timeout_s,
        deadline_s=settings.provider_deadline_s,
    )


PROVIDERS: dict[str, ProviderBuilder] = {"openai": _openai, "anthropic": _anthropic, "bedrock": _bedrock}


def build_provider(settings: Settings, model_ref: str | None) -> tuple[Provider, str]:
    """The provider for "provider/model" (or the gateway default) and the provider's model name.

    With a fallback model configured (and different from this one) the provider is a
    ResilientProvider over both. Raises ModelNotConfigured, with a message fit to show the user,
    when nothing usable is set, the fallback included.
    """
    ref = model_ref or settings.resolved_model()
    if not ref:
        raise ModelNotConfigured(NOT_CONFIGURED)
    fallback_ref = settings.fallback_model
    if not fallback_ref or fallback_ref == ref:
        return _build(settings, ref, "Fix SIGIL_MODEL or the workspace's model.")
    # The wrapper counts the retries: the SDKs under it make none of their own.
    inner = settings.model_copy(update={"provider_max_retries": 0})
    primary, model = _build(inner, ref, "Fix SIGIL_MODEL or the workspace's model.")
    fallback, fallback_model = _build(inner, fallback_ref, "Fix SIGIL_FALLBACK_MODEL.")
    resilient = ResilientProvider(
        primary,
        fallback,
        fallback_model=fallback_model,
        max_attempts=settings.provider_max_retries + 1,
        base_delay_s=settings.provider_retry_base_delay_s,
        max_delay_s=settings.provider_retry_max_delay_s,
        deadline_s=settings.provider_deadline_s,
    )
    return resilient, model


def _build(settings: Settings, ref: str, fix: str) -> tuple[Provider, str]:
    prefix, sep, model = ref.partition("/")
    if not sep or not prefix or not model:
        raise ModelNotConfigured(
            f"The model {ref!r} is not of the form provider/model (for example openai/gpt-4.1-mini). {fix}"
        )
    builder = PROVIDERS.get(prefix)
    if builder is None:
        known = ", ".join(PROVIDERS)  # registry order: the original provider first
        raise ModelNotConfigured(
            f"Unknown model provider {prefix!r} in {ref!r}; known providers: {known}. {fix}"
        )
    allowed = settings.allowed_providers()
    if allowed is not None and prefix not in allowed:
        # The function's role holds no grant for this provider (its key secret, or Bedrock), so
        # the call would fail with AccessDenied: say which grant is missing instead.
        listed = ",".join(sorted(allowed)) or "none"
        raise ModelNotConfigured(
            f"The model {ref!r} uses the {prefix} provider, which this deployment is not granted "
            f"(SIGIL_PROVIDERS={listed}): its API key or Bedrock grant is not in the role. Redeploy "
            f"allowing it (docs/deploy.md: -c providers=..., or -c model=... for Bedrock), or "
            f"{fix[0].lower()}{fix[1:]}"
        )
    return builder(settings), model


def probe_model(settings: Settings, model_ref: str | None = None, timeout_s: float = 3.0) -> str | None:
    """One line on why the model's server will not answer (stopped, misspelt, refusing the key),
    or None: it answered, or its provider cannot be asked (Bedrock), or no model is configured
    (build_provider's message says that one). One request, `timeout_s` at most
    (shared.providers.probe); with a fallback model, the primary's server is the one asked."""
    try:
        provider, _ = build_provider(settings, model_ref)
    except ModelNotConfigured:
        return None
    if isinstance(provider, ResilientProvider):
        provider = provider.primary
    probe = getattr(provider, "probe", None)
    if probe is None:
        return None
    problem: str | None = probe(timeout_s)
    return problem


def cached_provider_factory(
    settings: Settings, maxsize: int = 16
) -> Callable[[str | None], tuple[Provider, str]]:
    """build_provider with one client per model reference, kept for the life of the process.

    Failures are not cached (lru_cache never stores an exception): a workspace whose model is
    misconfigured is told so on every turn, and one that is fixed works on the next.
    """

    @lru_cache(maxsize=maxsize)
    def factory(model_ref: str | None) -> tuple[Provider, str]:
        return build_provider(settings, model_ref)

    return factory
