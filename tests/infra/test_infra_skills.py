"""The skills bucket: encrypted, versioned, private, TLS only, kept on delete; the agent alone may
read it, and only under skills/; its name reaches the agent and the stack's outputs."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.helpers import Synth, logical_id


def _statements_of(synth: Synth, role_owner: Any) -> list[dict[str, Any]]:
    role = {"Ref": logical_id(role_owner.handler.role)}
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_bucket_is_encrypted_versioned_private_and_kept(each_stage: Synth) -> None:
    bucket_id = logical_id(each_stage.stack.skills.bucket)
    bucket = each_stage.raw["Resources"][bucket_id]
    props = bucket["Properties"]
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["DeletionPolicy"] == "Retain"
    policies = [
        p
        for p in each_stage.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    (policy,) = policies
    (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_only_the_agent_reads_and_only_the_skills_prefix(dev: Synth) -> None:
    stack = dev.stack
    bucket_id = logical_id(stack.skills.bucket)
    on_bucket = [s for s in _statements_of(dev, stack.agent) if bucket_id in json.dumps(s["Resource"])]
    actions = sorted(s["Action"] for s in on_bucket)
    assert actions == ["s3:GetObject", "s3:ListBucket"]
    get = next(s for s in on_bucket if s["Action"] == "s3:GetObject")
    # CDK merges the agent's GetObject statements (the sandbox cache's too) into one.
    resources = get["Resource"] if isinstance(get["Resource"], list) else [get["Resource"]]
    skills = [r for r in resources if bucket_id in json.dumps(r)]
    assert [r["Fn::Join"][1][-1] for r in skills] == ["/skills/*"]
    listing = next(s for s in on_bucket if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["skills/*"]}}
    for other in (stack.ingress, stack.consolidation):
        assert not [s for s in _statements_of(dev, other) if bucket_id in json.dumps(s["Resource"])]


def test_the_agent_and_the_outputs_name_the_bucket(dev: Synth) -> None:
    bucket_ref = {"Ref": logical_id(dev.stack.skills.bucket)}
    functions = dev.resources("AWS::Lambda::Function")
    agent = functions[logical_id(dev.stack.agent.function)]
    assert agent["Properties"]["Environment"]["Variables"]["SIGIL_SKILLS_BUCKET"] == bucket_ref
    assert dev.raw["Outputs"]["SkillsBucket"]["Value"] == bucket_ref
