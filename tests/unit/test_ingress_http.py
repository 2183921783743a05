"""The webhook's request adapter, shared by the Lambda and the local gateway (shared.ingress.http)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from shared.errors import BadRequest, SigilError
from shared.ingress.http import HttpAnswer, refusal, request_from_v2

EVENTS = Path(__file__).resolve().parents[2] / "events"


def test_a_v2_event_becomes_the_request_its_client_signed() -> None:
    # Given the sample web event, with a query string and its body base64-encoded
    raw = json.loads((EVENTS / "webhook_web.json").read_text())
    body = raw["body"].encode()
    raw.update(rawQueryString="after=3", body=base64.b64encode(body).decode(), isBase64Encoded=True)
    raw["headers"]["X-Sigil-Signature"] = raw["headers"].pop("x-sigil-signature")
    # When it is translated
    request = request_from_v2(APIGatewayProxyEventV2(raw))
    # Then the body is the bytes sent, the target keeps the query, and header names are lower-case
    assert request.method == "POST"
    assert request.body == body
    assert request.target == "/webhooks/web/default?after=3"
    assert request.headers["x-sigil-signature"].startswith("v1=")
    assert request.path_params == {"workspace": "default"}


def test_a_refusal_carries_the_errors_code_and_reason_with_its_status() -> None:
    assert refusal(BadRequest("'after' must be an integer")) == HttpAnswer(
        400, {"error": "bad_request", "message": "'after' must be an integer"}
    )
    misconfigured = SigilError("the webhook needs SIGIL_QUEUE_URL", code="misconfigured")
    assert refusal(misconfigured).status == 500
