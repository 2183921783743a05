"""docs/deploy.md's `sam local invoke` recipe against the template its synth command makes.

SAM's `--env-vars` file only replaces the variables a function's template already defines and
drops the others (aws/aws-sam-cli#6145), so the documented env.json gives the agent a model only
if the documented synth puts SIGIL_MODEL into the agent's and the consolidator's environment.
SAM cannot resolve a CloudFormation reference either: each variable the template gives as one
must be in env.json as the stack output that holds its value (`<Name output>`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from infra.config import ROOT
from shared.config import Settings
from tests.infra.helpers import Synth, logical_id, synthesize

pytestmark = pytest.mark.slow

DEPLOY = ROOT / "docs" / "deploy.md"
# How env.json names the stack output a value is copied from.
OUTPUT_PLACEHOLDER = re.compile(r"<(\w+) output>")


def _section() -> str:
    text = DEPLOY.read_text()
    start = text.index("## Invoking the functions locally with SAM")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def documented_synth_context() -> dict[str, str]:
    """The `-c key=value` pairs of the section's `npx cdk synth` line."""
    [line] = [line for line in _section().splitlines() if line.startswith("npx cdk synth")]
    words = shlex.split(line.split("#", 1)[0])
    return dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-c")


def documented_env_json() -> dict[str, str]:
    [block] = re.findall(r"```json\n(.*?)```", _section(), re.DOTALL)
    parameters: dict[str, str] = json.loads(block)["Parameters"]
    return parameters


def environment(synth: Synth, function: Any) -> dict[str, Any]:
    variables: dict[str, Any] = synth.raw["Resources"][logical_id(function)]["Properties"]["Environment"][
        "Variables"
    ]
    return variables


def as_sam_runs_it(template_env: dict[str, Any], env_json: dict[str, str]) -> dict[str, Any]:
    """What SAM hands the function: the template's variables, those env.json names replaced."""
    return {name: env_json.get(name, value) for name, value in template_env.items()}


@pytest.fixture(scope="module")
def documented(tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path) -> Synth:
    context = documented_synth_context()
    stage = context.pop("stage")
    return synthesize(stage, tmp_path_factory.mktemp("cdk-sam"), stand_in_layer, **context)


def test_the_documented_env_json_gives_the_agent_and_the_consolidator_a_model(
    documented: Synth, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_json = documented_env_json()
    stack = documented.stack

    for function in (stack.agent.function, stack.consolidation.function):
        runs_with = as_sam_runs_it(environment(documented, function), env_json)
        assert runs_with["SIGIL_MODEL"] == env_json["SIGIL_MODEL"]
        for name, value in runs_with.items():
            monkeypatch.setenv(name, value if isinstance(value, str) else "unresolved")
        settings = Settings()
        assert settings.model == env_json["SIGIL_MODEL"]
        provider = env_json["SIGIL_MODEL"].split("/", 1)[0]
        allowed = settings.allowed_providers()
        assert allowed is not None and provider in allowed


def test_every_variable_of_the_documented_env_json_is_one_a_function_defines(documented: Synth) -> None:
    # A name no function's template defines would be dropped by SAM without a word.
    stack = documented.stack
    defined = set().union(
        *(
            environment(documented, f)
            for f in (stack.ingress.function, stack.agent.function, stack.consolidation.function)
        )
    )

    assert set(documented_env_json()) - defined == set()


def test_without_a_model_at_synth_the_agent_has_no_variable_for_env_json_to_replace(dev: Synth) -> None:
    # Why the documented synth names a model: the default template leaves SIGIL_MODEL out.
    assert "SIGIL_MODEL" not in environment(dev, dev.stack.agent.function)
    assert "model" in documented_synth_context()


def test_every_reference_in_a_functions_environment_is_in_the_documented_env_json_as_its_output(
    documented: Synth,
) -> None:
    # SAM passes a reference on unresolved; the operator can fill it only from an output.
    env_json = documented_env_json()
    outputs: dict[str, Any] = documented.raw["Outputs"]
    functions = documented.resources("AWS::Lambda::Function")
    references: dict[str, Any] = {}
    for function_id, function in functions.items():
        for name, value in function["Properties"].get("Environment", {}).get("Variables", {}).items():
            if not isinstance(value, str):
                # One value per name whichever function has it: env.json is one file for all.
                assert references.setdefault(name, value) == value, (function_id, name)
    # The agent's extraction queue and WebSocket endpoint are among them, for the webhook's page URL too.
    assert {"SIGIL_EXTRACTION_QUEUE_URL", "SIGIL_WS_ENDPOINT", "SIGIL_WS_URL", "SIGIL_QUEUE_URL"} <= set(
        references
    )

    unfilled = sorted(name for name in references if name not in env_json)
    assert unfilled == []
    for name, value in references.items():
        placeholder = OUTPUT_PLACEHOLDER.fullmatch(env_json[name])
        assert placeholder is not None, f"{name}: {env_json[name]!r} names no output"
        output = placeholder.group(1)
        assert output in outputs, f"{name}: the stack has no output {output}"
        assert outputs[output]["Value"] == value, f"{name}: output {output} holds another value"


def test_every_output_the_documented_env_json_names_exists(documented: Synth) -> None:
    named = {
        name: found.group(1)
        for name, value in documented_env_json().items()
        if (found := OUTPUT_PLACEHOLDER.fullmatch(value))
    }
    assert named and set(named.values()) - set(documented.raw["Outputs"]) == set()
