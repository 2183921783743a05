"""The chat page's uploads in the cloud, on in-process moto: the webhook function issues a presigned
S3 POST to the media bucket, the file is posted to it as a browser posts a form (moto's S3 answers
the POST), the confirm route records it in the bucket's MediaStore after sniffing the bytes, and the
ws function queues a `send` frame naming it, with the file's details on the lane item.

moto does not enforce a POST policy's conditions, so the policy is read back from the form's fields
to show what S3 would enforce (the size range, the key, the encryption, the metadata), and the
confirm step's own check of the size is shown with a file past the limit.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from moto import mock_aws

from functions.webhook import handler as webhook
from functions.ws import handler as ws
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.aws.media import S3MediaStore
from shared.channels import web, web_tokens
from shared.local.aws_mode.http_front import UPLOAD_CONFIRM, UPLOAD_SLOT, http_api_event
from shared.models import LaneItem
from tests.support import upload_files
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
SECRET = "sample-web-secret-not-real"
WS = "default"
CONNECTION = "L0SM9cOFvHcCIhw="
ENDPOINT = "https://abc123def4.execute-api.us-east-1.amazonaws.com/prod"
CONTEXT: Any = context_for("sigil-webhook")


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("uploads")
        clients.secretsmanager(REGION).create_secret(Name=f"sigil/{web.secret_name(WS)}", SecretString=SECRET)
        cloud.reset(config=resources.settings(secrets_prefix="sigil/", ws_endpoint=ENDPOINT))
        yield resources
        cloud.reset()


def token(user: str = "alice") -> str:
    return web_tokens.mint(SECRET, web_tokens.claims_for(WS, user, [f"{user}.*"], now=time.time()))


def call(route_key: str, path: str, body: bytes, tok: str, **params: str) -> tuple[int, dict[str, Any]]:
    raw_path, _, query = path.partition("?")
    event = http_api_event(
        route_key=route_key,
        method="POST",
        raw_path=raw_path,
        raw_query=query,
        headers=[("content-type", "application/json"), ("authorization", f"Bearer {tok}")],
        body=body,
        path_parameters={"workspace": WS, **params},
    )
    answer = webhook.lambda_handler(event, CONTEXT)
    return int(answer["statusCode"]), json.loads(answer["body"])


def slot(
    tok: str, *, size: int, name: str = "photo.png", kind: str = "image/png"
) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"session": "alice.1", "name": name, "size": size, "type": kind}).encode()
    return call(UPLOAD_SLOT, f"/media/{WS}/uploads", body, tok)


def post_form(answer: dict[str, Any], data: bytes) -> int:
    # What the page does: a multipart form, the signed fields first and the file last.
    got = requests.post(answer["url"], data=answer["fields"], files={"file": ("photo.png", data)}, timeout=30)
    return got.status_code


def confirm(answer: dict[str, Any], tok: str) -> tuple[int, dict[str, Any]]:
    return call(UPLOAD_CONFIRM, answer["confirm"], b"", tok, media_id=answer["media_id"])


def test_a_png_goes_to_the_bucket_by_presigned_post_and_is_recorded_on_confirm(aws: AwsResources) -> None:
    image = upload_files.png()
    status, answer = slot(token(), size=len(image))
    assert status == 200, answer
    policy = json.loads(base64.b64decode(answer["fields"]["policy"]))
    conditions = policy["conditions"]
    # Bounded by the largest kind the workspace takes (MediaLimits' defaults: audio, 25 MB); the key
    # under the workspace's prefix; encrypted; the slot's session and user pinned.
    assert ["content-length-range", 1, 25_000_000] in conditions
    key = f"media/{WS}/{answer['media_id']}/upload"
    assert {"key": key} in conditions and answer["fields"]["key"] == key
    assert {"x-amz-server-side-encryption": "AES256"} in conditions
    assert {"x-amz-meta-session": "alice.1"} in conditions and {"x-amz-meta-user": "alice"} in conditions
    assert answer["expires_in"] == 300

    assert post_form(answer, image) == 204
    status, item = confirm(answer, token())
    assert status == 200, item
    assert (item["kind"], item["mime_type"], item["size"], item["name"]) == (
        "image",
        "image/png",
        len(image),
        "photo.png",
    )
    store = S3MediaStore(aws.media_bucket, region=REGION)
    stored = store.get(WS, item["media_id"])
    assert stored is not None and (stored.user_id, stored.session_id) == ("alice", "web.alice.1")
    assert store.read(WS, item["media_id"]) == image
    s3 = clients.s3(REGION)
    head = s3.head_object(Bucket=aws.media_bucket, Key=f"media/{WS}/{item['media_id']}/bytes")
    assert head["ServerSideEncryption"] == "AES256"
    # The staged upload is gone; a second confirm (a retry) answers the same.
    assert "Contents" not in s3.list_objects_v2(Bucket=aws.media_bucket, Prefix=key)
    assert confirm(answer, token()) == (200, item)


def test_a_file_past_the_limit_is_refused_on_confirm_and_nothing_is_kept(aws: AwsResources) -> None:
    status, answer = slot(token(), size=100)
    assert status == 200
    # Declared 100 bytes; 26 MB posted (S3 would refuse it by the policy; moto does not).
    assert post_form(answer, upload_files.png() + b"\x00" * 26_000_000) == 204
    status, refused = confirm(answer, token())
    assert status == 413 and refused["error"] == "media_refused"
    objects = clients.s3(REGION).list_objects_v2(Bucket=aws.media_bucket, Prefix=f"media/{WS}/")
    assert "Contents" not in objects


def test_a_file_too_large_is_refused_from_its_declared_size(aws: AwsResources) -> None:
    status, refused = slot(token(), size=100_000_000)
    assert status == 413 and "100 MB" in refused["message"]


def test_another_persons_upload_cannot_be_confirmed(aws: AwsResources) -> None:
    image = upload_files.png()
    _, answer = slot(token(), size=len(image))
    assert post_form(answer, image) == 204
    status, refused = confirm(answer, token("bob"))
    assert status == 403 and refused["error"] == "media_forbidden"
    assert confirm(answer, token())[0] == 200


def _ws(frame: dict[str, Any] | None, tok: str | None = None) -> None:
    name = "ws_connect.json" if frame is None else "ws_send.json"
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    if frame is None:
        event["queryStringParameters"] = {"token": tok}
        event["multiValueQueryStringParameters"] = {"token": [tok]}
    else:
        event["body"] = json.dumps(frame)
    ws.lambda_handler(event, context_for("sigil-ws"))


def test_the_ws_function_queues_a_message_naming_the_file(aws: AwsResources) -> None:
    image = upload_files.png()
    _, answer = slot(token(), size=len(image))
    post_form(answer, image)
    _, item = confirm(answer, token())
    _ws(None, token())
    frame = {
        "type": "send",
        "event_id": "e1",
        "session": "alice.1",
        "attachments": [{"media_id": item["media_id"]}],
    }
    _ws(frame)
    # bob's message naming alice's file is refused; nothing else is queued.
    _ws(None, token("bob"))
    _ws(frame | {"event_id": "e2", "session": "bob.1"})
    messages = clients.sqs(REGION).receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    [lane_item] = [serde.loads(LaneItem, m["Body"]) for m in messages]
    assert lane_item.inbound.text == ""
    [attachment] = lane_item.inbound.attachments
    assert (attachment.media_id, attachment.kind, attachment.mime_type) == (
        item["media_id"],
        "image",
        "image/png",
    )
    assert attachment.size == len(image) and attachment.name == "photo.png"
