"""The chat page deployed with the stack: served by the webhook function from the HTTP API (GET /,
/config.json, /assets/{name}), told the WebSocket API's URL in its environment."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import DockerImage

from infra.constructs.function import FUNCTIONS_DIR, _HandlerWithShared
from infra.constructs.ingress import TURN_ROUTES
from shared.channels import web_page
from tests.infra.helpers import Synth, logical_id

PAGE_ROUTES = {"GET /", "GET /config.json", "GET /assets/{name}"}


def test_the_page_routes_reach_the_webhook_and_are_not_turn_routes(dev: Synth) -> None:
    keys = {r["Properties"]["RouteKey"] for r in dev.resources("AWS::ApiGatewayV2::Route").values()}
    assert keys >= PAGE_ROUTES
    # Reading the page queues nothing: it is under the stage's general throttle, not the turns'.
    assert not PAGE_ROUTES & {f"{m} {p}" for m, p in TURN_ROUTES}
    webhook_integrations = {
        k
        for k, r in dev.resources("AWS::ApiGatewayV2::Integration").items()
        if logical_id(dev.stack.ingress.function) in str(r["Properties"]["IntegrationUri"])
    }
    for route in dev.resources("AWS::ApiGatewayV2::Route").values():
        if route["Properties"]["RouteKey"] in PAGE_ROUTES:
            target = route["Properties"]["Target"]["Fn::Join"][1][1]["Ref"]
            assert target in webhook_integrations


def test_the_webhook_is_told_the_websocket_url(dev: Synth) -> None:
    props = dev.raw["Resources"][logical_id(dev.stack.ingress.function)]["Properties"]
    url = props["Environment"]["Variables"]["SIGIL_WS_URL"]
    # wss://{the WebSocket API's id}.execute-api.{region}.{suffix}/live
    joined = str(url)
    assert "wss://" in joined and logical_id(dev.stack.websocket.api) in joined and "/live" in joined


def test_the_page_ships_in_the_webhook_bundle(tmp_path: Path) -> None:
    # It moved out of the dev kit (shared/local/ is left out of every bundle) for this.
    assert _HandlerWithShared(FUNCTIONS_DIR / "webhook").try_bundle(
        str(tmp_path), image=DockerImage("unused")
    )
    page = tmp_path / "shared" / "channels" / "page"
    assert (page / "index.html").read_bytes() == (web_page.PAGE_DIR / "index.html").read_bytes()
    assert sorted(p.name for p in (page / "assets").iterdir()) == sorted(web_page.ASSETS)
