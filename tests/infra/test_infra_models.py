"""The chat model (`-c model=...`): each provider choice gets the grants it needs, and no more.

An OpenAI or Anthropic model is reached with its API key (that provider's secret alone; the
`providers` context adds others for the agent) and needs no Bedrock grant; a Bedrock model needs
no key, and bedrock:InvokeModelWithResponseStream (ConverseStream) on exactly that model, or, for
a cross-Region inference profile, on the profile and on the model it routes to, only through that
profile.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.app import build_app
from infra.config import ROOT
from infra.constructs.bedrock import PROFILE_REASON
from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEY_OF, LLM_KEYS, TOOL_KEYS
from tests.infra.helpers import Synth, logical_id, ref_or_getatt_target, synthesize

pytestmark = pytest.mark.slow

TITAN_V2 = "amazon.titan-embed-text-v2:0"
EMBEDDING_ARN = f"arn:${{AWS::Partition}}:bedrock:${{AWS::Region}}::foundation-model/{TITAN_V2}"
CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1:0"
STREAM = "bedrock:InvokeModelWithResponseStream"


@pytest.fixture(scope="module")
def with_context(
    tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path
) -> Iterator[Callable[..., Synth]]:
    """The prod stage synthesised with these context values (each set once per module): every
    secret is the stack's there, so each grant names one (dev grants most by name)."""
    cache: dict[tuple[tuple[str, str], ...], Synth] = {}

    def get(**values: str) -> Synth:
        key = tuple(sorted(values.items()))
        if key not in cache:
            cache[key] = synthesize("prod", tmp_path_factory.mktemp("cdk-model"), stand_in_layer, **values)
        return cache[key]

    yield get


@pytest.fixture(scope="module")
def with_model(with_context: Callable[..., Synth]) -> Callable[[str], Synth]:
    return lambda model: with_context(model=model)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _render(value: Any) -> str:
    """An ARN as text: {"Ref": "AWS::Region"} becomes ${AWS::Region}, joins are joined."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return f"${{{value['Ref']}}}"
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_render(p) for p in parts)
    raise AssertionError(f"unexpected ARN shape {value!r}")


def _statements(synth: Synth, role_owner: Any) -> list[dict[str, Any]]:
    role = {"Ref": logical_id(role_owner.handler.role)}
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _bedrock_grants(synth: Synth, role_owner: Any) -> list[tuple[frozenset[str], frozenset[str], str]]:
    """(actions, resources, condition as JSON) of each statement with a bedrock: action."""
    grants = []
    for statement in _statements(synth, role_owner):
        actions = frozenset(_as_list(statement["Action"]))
        if any(a.startswith("bedrock:") for a in actions):
            assert statement["Effect"] == "Allow"
            resources = frozenset(_render(r) for r in _as_list(statement["Resource"]))
            condition = statement.get("Condition", {})
            rendered = {op: {k: _render(v) for k, v in keys.items()} for op, keys in condition.items()}
            grants.append((actions, resources, json.dumps(rendered, sort_keys=True)))
    return sorted(grants, key=repr)


def _granted_secrets(synth: Synth, role_owner: Any) -> set[str]:
    secret_ids = {logical_id(s): key for key, s in synth.stack.secrets.secrets.items()}
    return {
        secret_ids[ref_or_getatt_target(r)]
        for statement in _statements(synth, role_owner)
        if "secretsmanager:GetSecretValue" in _as_list(statement["Action"])
        for r in _as_list(statement["Resource"])
        # The named routes' secrets are granted by ARN pattern (test_infra_policies checks them).
        if "Fn::Join" not in r
    }


EMBEDDING = (frozenset({"bedrock:InvokeModel"}), frozenset({EMBEDDING_ARN}), "{}")


def _expected_chat_grants(model: str) -> list[tuple[frozenset[str], frozenset[str], str]]:
    provider, _, model_id = model.partition("/")
    if provider != "bedrock":
        return []
    geography, _, routed = model_id.partition(".")
    if geography not in {"us", "global"}:
        arn = f"arn:${{AWS::Partition}}:bedrock:${{AWS::Region}}::foundation-model/{model_id}"
        return [(frozenset({STREAM}), frozenset({arn}), "{}")]
    region = "arn:${AWS::Partition}:bedrock:${AWS::Region}"
    profile = f"{region}:${{AWS::AccountId}}:inference-profile/{model_id}"
    models = {f"arn:${{AWS::Partition}}:bedrock:*::foundation-model/{routed}"}
    if geography == "global":
        models.add(f"arn:${{AWS::Partition}}:bedrock:::foundation-model/{routed}")
    condition = json.dumps({"StringEquals": {"bedrock:InferenceProfileArn": profile}}, sort_keys=True)
    return [
        (frozenset({STREAM}), frozenset({profile}), "{}"),
        (frozenset({STREAM}), frozenset(models), condition),
    ]


MODELS = (
    "openai/gpt-4.1-mini",
    "anthropic/claude-sonnet-4-5",
    f"bedrock/{CLAUDE}",
    f"bedrock/us.{CLAUDE}",
    f"bedrock/global.{CLAUDE}",
)


def _environment(synth: Synth, role_owner: Any) -> dict[str, Any]:
    function = synth.raw["Resources"][logical_id(role_owner.function)]
    variables: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return variables


@pytest.mark.parametrize("model", MODELS)
def test_each_model_choice_gets_exactly_its_grants(with_model: Callable[[str], Synth], model: str) -> None:
    synth = with_model(model)
    stack = synth.stack
    provider = model.partition("/")[0]
    # The API key of an OpenAI or Anthropic model, and none for a Bedrock one (the role is its key).
    keys = {LLM_KEY_OF[provider].key} if provider in LLM_KEY_OF else set()

    # The agent runs turns and the consolidator summarises with SIGIL_MODEL: both stream from it.
    for owner in (stack.agent, stack.consolidation):
        expected = sorted([EMBEDDING, *_expected_chat_grants(model)], key=repr)
        assert _bedrock_grants(synth, owner) == expected, owner.node.path
        # And each is told it may use that provider alone, so it reads no other key.
        assert _environment(synth, owner)["SIGIL_PROVIDERS"] == provider
    assert _bedrock_grants(synth, stack.ingress) == []
    # Of the LLM keys, each reads its model's alone: OpenAI's and not Anthropic's, the reverse,
    # or neither for Bedrock.
    assert _granted_secrets(synth, stack.ingress) == {s.key for s in INGRESS_SECRETS} | {"web/default"}
    assert _granted_secrets(synth, stack.agent) == {s.key for s in (*CHANNEL_TOKENS, *TOOL_KEYS)} | keys
    assert _granted_secrets(synth, stack.consolidation) == keys


def test_the_providers_context_adds_keys_for_the_agent_alone(with_context: Callable[..., Synth]) -> None:
    # Given an OpenAI model, and Anthropic allowed for workspaces whose own model is Anthropic's
    synth = with_context(model="openai/gpt-4.1-mini", providers="anthropic")
    stack = synth.stack

    # The agent may read both keys and use both providers; the consolidator, which summarises
    # with SIGIL_MODEL only, reads the OpenAI key alone.
    assert _granted_secrets(synth, stack.agent) == {s.key for s in (*CHANNEL_TOKENS, *LLM_KEYS, *TOOL_KEYS)}
    assert _environment(synth, stack.agent)["SIGIL_PROVIDERS"] == "anthropic,openai"
    assert _granted_secrets(synth, stack.consolidation) == {LLM_KEY_OF["openai"].key}
    assert _environment(synth, stack.consolidation)["SIGIL_PROVIDERS"] == "openai"
    # Still no Bedrock chat model: the embedding model's grant alone.
    for owner in (stack.agent, stack.consolidation):
        assert _bedrock_grants(synth, owner) == [EMBEDDING]


def test_openai_embeddings_bring_the_openai_key(with_context: Callable[..., Synth]) -> None:
    synth = with_context(model="anthropic/claude-sonnet-4-5", embedding_model="openai/text-embedding-3-small")
    stack = synth.stack

    for owner in (stack.agent, stack.consolidation):
        assert _granted_secrets(synth, owner) >= {s.key for s in LLM_KEYS}, owner.node.path
        assert _environment(synth, owner)["SIGIL_PROVIDERS"] == "anthropic,openai"
        # No Bedrock model at all: no bedrock: statement.
        assert _bedrock_grants(synth, owner) == []


@pytest.mark.parametrize("providers", ["bedrock", "openai,mistral"])
def test_providers_names_only_key_providers(stand_in_layer: Path, providers: str) -> None:
    context = {"stage": "dev", "providers": providers, "layer_dir": str(stand_in_layer)}

    with pytest.raises(ValueError, match="providers takes openai, anthropic"):
        build_app(context)


@pytest.mark.parametrize("model", [m for m in MODELS if m.startswith("bedrock/")])
def test_a_bedrock_model_synthesises_with_nothing_unacknowledged(
    with_model: Callable[[str], Synth], model: str
) -> None:
    report = with_model(model).validation_report()

    findings = [v["ruleName"] for plugin in report["pluginReports"] for v in plugin["violations"]]
    assert findings == []


def test_the_inference_profile_acknowledgement_is_documented() -> None:
    # It is recorded only when the model is an inference profile, so the list that the default
    # stages are checked against leaves it out; docs/cdk-nag.md still gives it word for word.
    lines = (ROOT / "docs" / "cdk-nag.md").read_text().splitlines()
    # Quoted there as a block quote: without its ">" markers and line breaks.
    text = " ".join(" ".join(line.removeprefix(">") for line in lines).split())

    assert PROFILE_REASON in text


def test_an_arn_for_a_model_is_refused(stand_in_layer: Path) -> None:
    context = {"stage": "dev", "model": f"bedrock/arn:aws:bedrock:us-east-1:1:inference-profile/us.{CLAUDE}"}

    with pytest.raises(ValueError, match="not an ARN"):
        build_app({**context, "layer_dir": str(stand_in_layer)})
