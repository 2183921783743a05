"""build_provider: "provider/model" references, the registry, and the no-model message."""

from __future__ import annotations

import pytest

from shared.config import Settings
from shared.errors import ModelNotConfigured
from shared.providers import NOT_CONFIGURED, PROVIDERS, build_provider, cached_provider_factory
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider
from shared.providers.openai import OpenAIProvider


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own shell must not decide these tests.
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_no_model_says_which_variables_to_set() -> None:
    with pytest.raises(ModelNotConfigured) as info:
        build_provider(Settings(), None)
    assert info.value.message == NOT_CONFIGURED
    for variable in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        assert variable in NOT_CONFIGURED


def test_openai_model_with_a_key_builds_the_openai_provider() -> None:
    provider, model = build_provider(Settings(model="openai/gpt-4.1-mini", OPENAI_API_KEY="sk-x"), None)
    assert isinstance(provider, OpenAIProvider)
    assert (provider.name, model) == ("openai", "gpt-4.1-mini")


def test_the_reference_argument_wins_over_the_default_and_keeps_slashes_in_the_model() -> None:
    settings = Settings(model="openai/gpt-4.1-mini", OPENAI_BASE_URL="http://127.0.0.1:1/v1")
    provider, model = build_provider(settings, "openai/meta-llama/Llama-3-8b")
    assert model == "meta-llama/Llama-3-8b"
    assert isinstance(provider, OpenAIProvider) and provider.base_url == "http://127.0.0.1:1/v1"


def test_openai_without_key_or_base_url_names_both_variables() -> None:
    with pytest.raises(ModelNotConfigured, match="OPENAI_API_KEY nor OPENAI_BASE_URL"):
        build_provider(Settings(model="openai/gpt-4.1-mini"), None)


def test_unknown_provider_prefix_lists_the_known_ones() -> None:
    with pytest.raises(
        ModelNotConfigured, match=r"Unknown model provider 'mistral'.*known providers: openai"
    ):
        build_provider(Settings(), "mistral/large")


@pytest.mark.parametrize("ref", ["gpt-4.1-mini", "openai/", "/gpt"])
def test_a_reference_without_provider_and_model_is_refused(ref: str) -> None:
    with pytest.raises(ModelNotConfigured, match="provider/model"):
        build_provider(Settings(), ref)


def test_a_registered_builder_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = FunctionProvider(lambda r: "ok")

    def builder(settings: Settings) -> Provider:
        return fn

    monkeypatch.setitem(PROVIDERS, "function", builder)
    assert build_provider(Settings(), "function/any") == (fn, "any")


def test_the_cached_factory_builds_one_client_per_reference() -> None:
    factory = cached_provider_factory(Settings(OPENAI_API_KEY="sk-x"))
    first, _ = factory("openai/a")
    assert factory("openai/a")[0] is first
    assert factory("openai/b")[0] is not first
    with pytest.raises(ModelNotConfigured):
        factory(None)


def test_a_provider_outside_sigil_providers_is_refused_naming_the_grant() -> None:
    # Given a function granted OpenAI alone (what the stack sets for -c model=openai/...)
    settings = Settings(model="openai/gpt-4.1-mini", OPENAI_API_KEY="sk-x", providers="openai")

    # Its own model builds, and a workspace's Anthropic or Bedrock model is refused by name
    assert isinstance(build_provider(settings, None)[0], OpenAIProvider)
    for ref, provider in (
        ("anthropic/claude-sonnet-4-5", "anthropic"),
        ("bedrock/anthropic.claude-x", "bedrock"),
    ):
        with pytest.raises(ModelNotConfigured) as info:
            build_provider(settings, ref)
        assert f"uses the {provider} provider, which this deployment is not granted" in info.value.message
        assert "(SIGIL_PROVIDERS=openai)" in info.value.message
        assert info.value.message.endswith("or fix SIGIL_MODEL or the workspace's model.")


def test_an_empty_sigil_providers_allows_none_and_unset_allows_every_one() -> None:
    with pytest.raises(ModelNotConfigured, match=r"SIGIL_PROVIDERS=none"):
        build_provider(Settings(OPENAI_API_KEY="sk-x", providers=""), "openai/gpt-4.1-mini")
    assert isinstance(
        build_provider(Settings(OPENAI_API_KEY="sk-x"), "openai/gpt-4.1-mini")[0], OpenAIProvider
    )
