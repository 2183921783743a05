"""Model providers: "provider/model" references resolved to a Provider through a registry.

Each provider imports its SDK only when built, so `import shared.providers` stays cheap and a
gateway loads only the SDK of the provider it is configured for.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from shared.config import Settings
from shared.errors import ModelNotConfigured
from shared.providers.base import Provider
from shared.providers.openai import OpenAIProvider  # cheap: it imports the SDK only when built

ProviderBuilder = Callable[[Settings], Provider]

NOT_CONFIGURED = (
    "No model is configured. Set SIGIL_MODEL (for example openai/gpt-4.1-mini) and OPENAI_API_KEY, "
    "or OPENAI_BASE_URL for an OpenAI-compatible server, then restart the gateway."
)


def _openai(settings: Settings) -> Provider:
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    if not key and not settings.openai_base_url:
        raise ModelNotConfigured(
            "The model uses the openai provider but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set. "
            "Set OPENAI_API_KEY, or OPENAI_BASE_URL for an OpenAI-compatible server, "
            "then restart the gateway."
        )
    return OpenAIProvider(
        api_key=key,
        base_url=settings.openai_base_url,
        timeout_s=settings.provider_timeout_s,
        max_retries=settings.provider_max_retries,
    )


# Anthropic and Bedrock plug in here: a name and a builder, nothing else changes.
PROVIDERS: dict[str, ProviderBuilder] = {"openai": _openai}


def build_provider(settings: Settings, model_ref: str | None) -> tuple[Provider, str]:
    """The provider for "provider/model" (or the gateway default) and the provider's model name.

    Raises ModelNotConfigured, with a message fit to show the user, when nothing usable is set.
    """
    ref = model_ref or settings.resolved_model()
    if not ref:
        raise ModelNotConfigured(NOT_CONFIGURED)
    prefix, sep, model = ref.partition("/")
    if not sep or not prefix or not model:
        raise ModelNotConfigured(
            f"The model {ref!r} is not of the form provider/model (for example openai/gpt-4.1-mini). "
            "Fix SIGIL_MODEL or the workspace's model."
        )
    builder = PROVIDERS.get(prefix)
    if builder is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ModelNotConfigured(
            f"Unknown model provider {prefix!r} in {ref!r}; known providers: {known}. "
            "Fix SIGIL_MODEL or the workspace's model."
        )
    return builder(settings), model


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
