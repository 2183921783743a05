"""The chat page as the webhook Lambda serves it from the HTTP API (shared.channels.web_page), on
moto: the page, its assets with their types and cache headers, a strict Content-Security-Policy,
config.json naming the stack's WebSocket URL, and nothing outside the page's fixed list of files."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from functions.webhook import handler as webhook
from shared import cloud
from shared.adapters.aws import clients
from shared.channels import web_page
from tests.support.lambda_context import context_for
from tests.support.moto_aws import provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
WS_URL = "wss://ws123.execute-api.eu-west-1.amazonaws.com/live"
CONTEXT: Any = context_for("sigil-test")


@pytest.fixture
def lambda_env() -> Iterator[None]:
    with mock_aws():
        clients.reset()
        resources = provision("web-page")
        cloud.reset(config=resources.settings(secrets_prefix="sigil/", ws_url=WS_URL))
        yield
        cloud.reset()


def get(route_key: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    """The sample outbox GET, turned into a browser's GET of `path` (no signature, no query)."""
    event: dict[str, Any] = copy.deepcopy(json.loads((EVENTS / "webhook_outbox_get.json").read_text()))
    event["routeKey"] = event["requestContext"]["routeKey"] = route_key
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["rawQueryString"] = ""
    event.pop("queryStringParameters", None)
    event.pop("pathParameters", None)
    if params:
        event["pathParameters"] = params
    for name in ("x-sigil-timestamp", "x-sigil-signature"):
        event["headers"].pop(name, None)
    response: dict[str, Any] = webhook.lambda_handler(event, CONTEXT)
    return response


def headers(response: dict[str, Any]) -> dict[str, str]:
    return {k.lower(): v for k, v in (response.get("headers") or {}).items()}


def test_get_slash_is_the_page_with_a_strict_policy(lambda_env: None) -> None:
    response = get("GET /", "/")
    assert response["statusCode"] == 200
    assert response["body"] == (web_page.PAGE_DIR / "index.html").read_text()
    h = headers(response)
    assert h["content-type"] == "text/html; charset=utf-8"
    assert h["cache-control"] == "no-cache"
    assert h["x-content-type-options"] == "nosniff"
    policy = dict(part.strip().split(" ", 1) for part in h["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'"
    # Its own origin, the WebSocket API's and the media bucket's (the page's uploads: a presigned
    # POST), nothing else (no inline script, no other host).
    assert policy["connect-src"] == (
        "'self' wss://ws123.execute-api.eu-west-1.amazonaws.com https://web-page-media.s3.amazonaws.com"
    )
    # Images: its own, and the thumbnails it draws of a file being attached (blob:, then data:).
    assert policy["img-src"] == "'self' blob: data:"
    assert policy["frame-ancestors"] == "'none'"


def test_config_json_names_the_stacks_websocket_url(lambda_env: None) -> None:
    response = get("GET /config.json", "/config.json")
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"websocket_url": WS_URL}
    assert headers(response)["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("name", "content_type"),
    [("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8")],
)
def test_an_asset_with_its_type_and_cache_header(lambda_env: None, name: str, content_type: str) -> None:
    response = get("GET /assets/{name}", f"/assets/{name}", {"name": name})
    assert response["statusCode"] == 200
    assert response["body"] == (web_page.PAGE_DIR / "assets" / name).read_text()
    assert headers(response)["content-type"] == content_type
    assert headers(response)["cache-control"] == "public, max-age=300"


@pytest.mark.parametrize(
    "name",
    [
        "..%2F..%2Fhandler.py",
        "..%2Fweb_page.py",
        "../web_page.py",
        "index.html",
        "__init__.py",
        "%2Fetc%2Fpasswd",
    ],
)
def test_nothing_outside_the_pages_files_is_served(lambda_env: None, name: str) -> None:
    response = get("GET /assets/{name}", f"/assets/{name}", {"name": name})
    # A name with a slash matches no route (powertools' own 404); any other is not on the list.
    assert response["statusCode"] == 404
    assert "import" not in response["body"] and "root:" not in response["body"]
