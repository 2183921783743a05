"""In the cloud the LLM key comes from Secrets Manager, never from an environment variable, and
only the keys of the providers the function uses are read (issue 14, finding 2): the stack grants
no other, and Secrets Manager would answer AccessDenied."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.agent import handler as agent
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb import DynamoWorkspaceStore
from shared.adapters.aws.secrets import SecretsManagerStore
from shared.cloud import with_provider_keys
from shared.config import OPENAI_KEY_SECRET, Settings
from shared.models import WorkspaceConfig
from tests.integration.test_handlers import (
    CONTEXT,
    WS,
    aws,  # noqa: F401 -- fixture
    fake,  # noqa: F401 -- fixture
    load,
    settings_for,
    texts,
)
from tests.support.fake_openai import FakeOpenAI
from tests.support.moto_aws import REGION, AwsResources

OPENAI_SECRET, ANTHROPIC_SECRET = "sigil/llm/openai-api-key", "sigil/llm/anthropic-api-key"


def test_the_openai_key_is_read_from_secrets_manager() -> None:
    with mock_aws():
        # Given the key stored as the stack's secret and no key in the settings
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="sigil/" + OPENAI_KEY_SECRET, SecretString="sk-from-secrets-manager")
        store = SecretsManagerStore("sigil/", client=sm)
        bare = Settings(backend="aws", model="openai/gpt-4.1-mini", openai_api_key=None)
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
        bare = Settings(backend="aws", model="openai/gpt-4.1-mini", openai_api_key=None)
        assert with_provider_keys(bare, store).openai_api_key is None
        sm.create_secret(Name="sigil/" + OPENAI_KEY_SECRET, SecretString="sk-from-secrets-manager")
        explicit = Settings(backend="aws", model="openai/gpt-4.1-mini", openai_api_key="sk-explicit")  # type: ignore[arg-type]
        kept = with_provider_keys(explicit, store).openai_api_key
        assert kept is not None and kept.get_secret_value() == "sk-explicit"


def test_the_anthropic_key_is_read_from_secrets_manager_too() -> None:
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="sigil/llm/anthropic-api-key", SecretString="sk-ant-from-secrets-manager")
        store = SecretsManagerStore("sigil/", client=sm)
        completed = with_provider_keys(
            Settings(backend="aws", model="anthropic/claude-sonnet-4-5", anthropic_api_key=None), store
        )
        assert completed.anthropic_api_key is not None
        assert completed.anthropic_api_key.get_secret_value() == "sk-ant-from-secrets-manager"
        assert completed.openai_api_key is None


def _recording(sm: Any) -> list[str]:
    """The SecretId of every GetSecretValue this client makes from now on."""
    read: list[str] = []
    sm.meta.events.register(
        "provide-client-params.secrets-manager.GetSecretValue",
        lambda params, **_: read.append(params["SecretId"]),
    )
    return read


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # The model's provider alone, when SIGIL_PROVIDERS is unset
        ({"model": "openai/gpt-4.1-mini"}, [OPENAI_SECRET]),
        ({"model": "anthropic/claude-sonnet-4-5"}, [ANTHROPIC_SECRET]),
        # OpenAI embeddings need the OpenAI key beside an Anthropic model
        (
            {"model": "anthropic/claude-sonnet-4-5", "embedding_model": "openai/text-embedding-3-small"},
            [ANTHROPIC_SECRET, OPENAI_SECRET],
        ),
        # A Bedrock model has no key; nor has a gateway with no model
        ({"model": "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0"}, []),
        ({}, []),
        # SIGIL_PROVIDERS (what the stack grants) decides when set
        (
            {"model": "openai/gpt-4.1-mini", "providers": "anthropic,openai"},
            [ANTHROPIC_SECRET, OPENAI_SECRET],
        ),
        ({"model": "openai/gpt-4.1-mini", "providers": "bedrock,openai"}, [OPENAI_SECRET]),
    ],
)
def test_only_the_keys_of_the_providers_in_use_are_read(
    settings: dict[str, str], expected: list[str]
) -> None:
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        for name in (OPENAI_SECRET, ANTHROPIC_SECRET):
            sm.create_secret(Name=name, SecretString=f"key-of-{name}")
        read = _recording(sm)

        with_provider_keys(Settings(backend="aws", **settings), SecretsManagerStore("sigil/", client=sm))

        assert sorted(read) == expected


@pytest.fixture
def both_keys_stored(aws: AwsResources) -> list[str]:  # noqa: F811
    """Both LLM keys in Secrets Manager, as the stack creates them, and the reads recorded."""
    sm = clients.secretsmanager(REGION)
    sm.create_secret(Name=OPENAI_SECRET, SecretString="sk-openai-from-secrets-manager")
    sm.create_secret(Name=ANTHROPIC_SECRET, SecretString="sk-ant-from-secrets-manager")
    return _recording(sm)


def _agent_as_deployed(aws: AwsResources, fake: FakeOpenAI) -> None:  # noqa: F811
    # What the stack sets for `-c model=openai/...`: the model, and SIGIL_PROVIDERS=openai; no key
    # in the environment. cloud.reset keeps the cached clients' moto state and the hook above.
    settings = settings_for(
        aws,
        model="openai/fake-model",
        OPENAI_BASE_URL=fake.base_url,
        providers="openai",
        provider_max_retries=0,
    )
    cloud.reset(config=settings)


def test_the_agent_with_an_openai_model_never_reads_the_anthropic_key(
    aws: AwsResources,  # noqa: F811
    fake: FakeOpenAI,  # noqa: F811
    both_keys_stored: list[str],
) -> None:
    _agent_as_deployed(aws, fake)
    read = _recording(clients.secretsmanager(REGION))

    # When the agent runs the sample batch (three turns, two sessions)
    assert agent.lambda_handler(load("agent_sqs_fifo_batch.json"), CONTEXT) == {"batchItemFailures": []}

    # Then the model was called with the OpenAI key from Secrets Manager, read once
    assert len(fake.requests) == 3
    assert {h["authorization"] for h in fake.headers} == {"Bearer sk-openai-from-secrets-manager"}
    assert read.count(OPENAI_SECRET) == 1
    # and the Anthropic key never
    assert ANTHROPIC_SECRET not in read + both_keys_stored


def test_a_workspace_model_of_a_provider_not_granted_is_refused_by_name(
    aws: AwsResources,  # noqa: F811
    fake: FakeOpenAI,  # noqa: F811
    both_keys_stored: list[str],
) -> None:
    # Given a workspace whose own model is Anthropic's, in a stack granted OpenAI only
    DynamoWorkspaceStore(aws.memory_table, client=clients.dynamodb(REGION)).put(
        WorkspaceConfig(id=WS, model="anthropic/claude-sonnet-4-5")
    )
    _agent_as_deployed(aws, fake)
    read = _recording(clients.secretsmanager(REGION))

    assert agent.lambda_handler(load("agent_sqs_fifo_batch.json"), CONTEXT) == {"batchItemFailures": []}

    # Then no model was called, the Anthropic key was never read (it would be AccessDenied), and
    # the user is told which grant is missing
    assert fake.requests == []
    assert ANTHROPIC_SECRET not in read + both_keys_stored
    [reply] = texts("web.kitchen")
    assert (
        "uses the anthropic provider, which this deployment is not granted (SIGIL_PROVIDERS=openai)" in reply
    )
    assert "-c providers=" in reply
