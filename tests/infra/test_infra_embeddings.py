"""The embedding model: SIGIL_EMBEDDING_MODEL and bedrock:InvokeModel on that one model ARN."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.helpers import Synth, logical_id

pytestmark = pytest.mark.slow

TITAN_V2 = "amazon.titan-embed-text-v2:0"


def _bedrock_statements(synth: Synth, role_owner: Any) -> list[dict[str, Any]]:
    role = {"Ref": logical_id(role_owner.handler.role)}
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if role not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(a.startswith("bedrock:") for a in actions):
                found.append(statement)
    return found


def test_agent_and_consolidator_may_invoke_only_the_embedding_model(each_stage: Synth) -> None:
    stack = each_stage.stack
    for owner in (stack.agent, stack.consolidation):
        [statement] = _bedrock_statements(each_stage, owner)
        assert statement["Effect"] == "Allow"
        assert statement["Action"] == "bedrock:InvokeModel"
        resource = json.dumps(statement["Resource"])
        # arn:${Partition}:bedrock:${Region}::foundation-model/amazon.titan-embed-text-v2:0
        assert f"::foundation-model/{TITAN_V2}" in resource
        assert "*" not in resource
    assert _bedrock_statements(each_stage, stack.ingress) == []
