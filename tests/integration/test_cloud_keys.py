"""In the cloud the LLM key comes from Secrets Manager, never from an environment variable."""

from __future__ import annotations

import boto3
from moto import mock_aws

from shared.adapters.aws.secrets import SecretsManagerStore
from shared.cloud import with_provider_keys
from shared.config import OPENAI_KEY_SECRET, Settings


def test_the_openai_key_is_read_from_secrets_manager() -> None:
    with mock_aws():
        # Given the key stored as the stack's secret and no key in the settings
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="sigil/" + OPENAI_KEY_SECRET, SecretString="sk-from-secrets-manager")
        store = SecretsManagerStore("sigil/", client=sm)
        bare = Settings(backend="aws", openai_api_key=None)
        # When the agent's settings are completed
        completed = with_provider_keys(bare, store)
        # Then the key is the stored one, and stays a SecretStr (never printed by repr)
        assert completed.openai_api_key is not None
        assert completed.openai_api_key.get_secret_value() == "sk-from-secrets-manager"
        assert "sk-from" not in repr(completed)


def test_an_explicit_key_wins_and_a_missing_secret_changes_nothing() -> None:
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        store = SecretsManagerStore("sigil/", client=sm)
        bare = Settings(backend="aws", openai_api_key=None)
        assert with_provider_keys(bare, store).openai_api_key is None
        sm.create_secret(Name="sigil/" + OPENAI_KEY_SECRET, SecretString="sk-from-secrets-manager")
        explicit = Settings(backend="aws", openai_api_key="sk-explicit")  # type: ignore[arg-type]
        kept = with_provider_keys(explicit, store).openai_api_key
        assert kept is not None and kept.get_secret_value() == "sk-explicit"


def test_the_anthropic_key_is_read_from_secrets_manager_too() -> None:
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="sigil/llm/anthropic-api-key", SecretString="sk-ant-from-secrets-manager")
        store = SecretsManagerStore("sigil/", client=sm)
        completed = with_provider_keys(Settings(backend="aws", anthropic_api_key=None), store)
        assert completed.anthropic_api_key is not None
        assert completed.anthropic_api_key.get_secret_value() == "sk-ant-from-secrets-manager"
        assert completed.openai_api_key is None
