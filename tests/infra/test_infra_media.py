"""The media bucket (docs/media.md): encrypted, private, TLS only, every object expired after the
media retention, not versioned (an erased file is gone); the agent reads and writes it (objects
only under media/; the webhook and ws function's grants for the chat page's uploads:
tests/infra/test_infra_uploads.py); its name reaches the agent and the stack's outputs."""

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


def test_the_bucket_is_encrypted_private_tls_only_and_expires_media(each_stage: Synth) -> None:
    bucket_id = logical_id(each_stage.stack.media.bucket)
    bucket = each_stage.raw["Resources"][bucket_id]
    props = bucket["Properties"]
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert "VersioningConfiguration" not in props
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (lifecycle,) = props["LifecycleConfiguration"]["Rules"]
    assert lifecycle["Status"] == "Enabled"
    assert lifecycle["Prefix"] == "media/"
    assert lifecycle["ExpirationInDays"] == each_stage.stack.media.retention_days == 30
    policies = [
        p
        for p in each_stage.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    (policy,) = policies
    (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_only_the_agent_reads_and_writes_and_only_the_media_prefix(dev: Synth) -> None:
    stack = dev.stack
    bucket_id = logical_id(stack.media.bucket)
    on_bucket = [s for s in _statements_of(dev, stack.agent) if bucket_id in json.dumps(s["Resource"])]
    objects = next(s for s in on_bucket if s["Action"] != "s3:ListBucket")
    assert sorted(objects["Action"]) == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    assert objects["Resource"]["Fn::Join"][1][-1] == "/media/*"
    listing = next(s for s in on_bucket if s["Action"] == "s3:ListBucket")
    # The bucket, unconditioned: a missing key answers 404, not 403 (infra/constructs/media.py)
    assert listing["Resource"] == {"Fn::GetAtt": [bucket_id, "Arn"]} and "Condition" not in listing
    assert len(on_bucket) == 2
    # The webhook and the ws function reach it for the chat page's uploads only
    # (tests/infra/test_infra_uploads.py); the consolidator never.
    assert not [s for s in _statements_of(dev, stack.consolidation) if bucket_id in json.dumps(s["Resource"])]


def test_the_agent_and_the_outputs_name_the_bucket(dev: Synth) -> None:
    bucket_ref = {"Ref": logical_id(dev.stack.media.bucket)}
    functions = dev.resources("AWS::Lambda::Function")
    agent = functions[logical_id(dev.stack.agent.function)]
    assert agent["Properties"]["Environment"]["Variables"]["SIGIL_MEDIA_BUCKET"] == bucket_ref
    assert dev.raw["Outputs"]["MediaBucket"]["Value"] == bucket_ref
    variables = functions[logical_id(dev.stack.consolidation.function)]["Properties"]["Environment"][
        "Variables"
    ]
    assert "SIGIL_MEDIA_BUCKET" not in variables
