"""The chat page's uploads in the stack (shared.media.upload, docs/web-channel.md#attachments): the
webhook may sign presigned POSTs to the media bucket and read back, record and delete what was
posted, under media/ only; the ws function may read records only; the bucket takes POSTs from the
page's origins alone (CORS); the webhook counts the day's bytes in its workspaces' usage partition
only and reads the configs and identities the sender check needs."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.helpers import Synth, logical_id, statements_on


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return sorted(action if isinstance(action, list) else [action])


def test_the_webhook_writes_and_the_ws_function_reads_the_bucket_under_media_only(dev: Synth) -> None:
    stack = dev.stack
    bucket_arn = {"Fn::GetAtt": [logical_id(stack.media.bucket), "Arn"]}
    for owner, objects_actions in (
        (stack.ingress, ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]),
        (stack.websocket, ["s3:GetObject"]),
    ):
        on_bucket = statements_on(dev, owner, stack.media.bucket)
        objects = [s for s in on_bucket if s["Action"] != "s3:ListBucket"]
        assert [_actions(s) for s in objects] == [objects_actions]
        assert objects[0]["Resource"]["Fn::Join"][1][-1] == "/media/*"
        # ListBucket on the bucket, so a record not there answers 404, not 403 (a refusal, not a fault).
        [listing] = [s for s in on_bucket if s["Action"] == "s3:ListBucket"]
        assert listing["Resource"] == bucket_arn and "Condition" not in listing


def test_the_bucket_takes_posts_from_the_pages_origin_only(dev: Synth) -> None:
    props = dev.raw["Resources"][logical_id(dev.stack.media.bucket)]["Properties"]
    [rule] = props["CorsConfiguration"]["CorsRules"]
    assert rule["AllowedMethods"] == ["POST"]
    # The HTTP API's own endpoint, which serves the page (no "*").
    [origin] = rule["AllowedOrigins"]
    assert "*" not in json.dumps(origin) and logical_id(dev.stack.ingress.api) in json.dumps(origin)


def test_the_functions_are_told_the_bucket_and_the_memory_table(dev: Synth) -> None:
    functions = dev.resources("AWS::Lambda::Function")
    bucket = {"Ref": logical_id(dev.stack.media.bucket)}
    webhook = functions[logical_id(dev.stack.ingress.function)]["Properties"]["Environment"]["Variables"]
    assert webhook["SIGIL_MEDIA_BUCKET"] == bucket
    assert webhook["SIGIL_MEMORY_TABLE"] == {"Ref": logical_id(dev.stack.memory.memory)}
    ws = functions[logical_id(dev.stack.websocket.function)]["Properties"]["Environment"]["Variables"]
    assert ws["SIGIL_MEDIA_BUCKET"] == bucket


def test_the_webhook_counts_uploads_in_its_workspaces_usage_partition_only(dev: Synth) -> None:
    stack = dev.stack
    [usage] = [
        s for s in statements_on(dev, stack.ingress, stack.memory.sessions) if "MEDIA_USAGE" in json.dumps(s)
    ]
    assert _actions(usage) == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert usage["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["WS#default#MEDIA_USAGE"]},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }
    [config] = statements_on(dev, stack.ingress, stack.memory.memory)
    assert _actions(config) == ["dynamodb:GetItem"]
    keys = config["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert sorted(keys) == ["WS#default", "WS#default#IDENTITY"]
