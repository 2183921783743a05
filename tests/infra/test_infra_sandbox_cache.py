"""run_python's compiled-runtime cache (infra/constructs/sandbox_cache.py): the precompile function
alone writes the bucket, write-once; the agent reads it and may invoke that function; a rule on
CloudFormation's stack-status event runs it after each deploy."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.helpers import Synth, logical_id


def _statements_of(synth: Synth, role: Any) -> list[dict[str, Any]]:
    ref = {"Ref": logical_id(role)}
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if ref in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return sorted(action if isinstance(action, list) else [action])


def test_only_the_precompile_function_writes_and_only_once(each_stage: Synth) -> None:
    stack = each_stage.stack
    bucket_id = logical_id(stack.sandbox_cache.bucket)
    (policy,) = [
        p
        for p in each_stage.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    statements = {s.get("Sid", "tls"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    writers = statements["OnlyThePrecompileFunctionWrites"]
    assert writers["Effect"] == "Deny" and writers["Principal"] == {"AWS": "*"}
    assert _actions(writers) == ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObject"]
    role_arn = {"Fn::GetAtt": [logical_id(stack.sandbox_cache.handler.role), "Arn"]}
    assert writers["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": role_arn}}
    once = statements["WriteOnce"]
    assert once["Effect"] == "Deny" and _actions(once) == ["s3:PutObject"]
    assert once["Condition"] == {"Null": {"s3:if-none-match": "true"}}


def test_the_agent_reads_the_cache_and_may_ask_for_a_compile_but_never_writes(dev: Synth) -> None:
    stack = dev.stack
    bucket_id = logical_id(stack.sandbox_cache.bucket)
    agent = [s for s in _statements_of(dev, stack.agent.handler.role) if bucket_id in json.dumps(s)]
    assert sorted(_actions(s) for s in agent) == [["s3:GetObject"], ["s3:ListBucket"]]
    listing = next(s for s in agent if _actions(s) == ["s3:ListBucket"])
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["sandbox/*"]}}
    invoke = [
        s for s in _statements_of(dev, stack.agent.handler.role) if "lambda:InvokeFunction" in _actions(s)
    ]
    function_arn = {"Fn::GetAtt": [logical_id(stack.sandbox_cache.function), "Arn"]}
    assert [s["Resource"] for s in invoke] == [function_arn]
    writer = [s for s in _statements_of(dev, stack.sandbox_cache.handler.role) if bucket_id in json.dumps(s)]
    assert sorted(_actions(s) for s in writer) == [["s3:GetObject", "s3:PutObject"], ["s3:ListBucket"]]
    objects = next(s for s in writer if "s3:PutObject" in _actions(s))
    assert json.dumps(objects["Resource"]).endswith('"/sandbox/*"]]}')


def test_each_deploy_of_this_stack_runs_the_precompile_function(dev: Synth) -> None:
    stack = dev.stack
    rule = dev.raw["Resources"][logical_id(stack.sandbox_cache.after_deploy)]["Properties"]
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.cloudformation"]
    assert pattern["detail-type"] == ["CloudFormation Stack Status Change"]
    assert pattern["detail"] == {
        "stack-id": [{"Ref": "AWS::StackId"}],
        "status-details": {"status": ["CREATE_COMPLETE", "UPDATE_COMPLETE"]},
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [logical_id(stack.sandbox_cache.function), "Arn"]}
    precompile = dev.raw["Resources"][logical_id(stack.sandbox_cache.function)]["Properties"]
    assert precompile["Architectures"] == ["arm64"] and precompile["ReservedConcurrentExecutions"] == 1
