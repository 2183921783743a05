"""Cost caps by default (issue 14, finding 7): reserved concurrency, the agent's event source's
maximum concurrency and per-route throttling, each changed by its context value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

from infra.config import Caps, Throttle, read_caps
from infra.constructs.ingress import ROUTES, route_key
from tests.infra.helpers import Synth, logical_id, synthesize

pytestmark = pytest.mark.slow

# The chat page's uploads queue nothing: the stage's default throttle.
UPLOAD_ROUTES = {route_key(m, p) for m, p in ROUTES if p.startswith("/media/")}
TURN_ROUTES = {route_key(m, p) for m, p in ROUTES if m == "POST"} - UPLOAD_ROUTES
CHANGED = {
    "agent_concurrency": "3",
    "webhook_concurrency": "none",
    "consolidate_concurrency": "4",
    "api_rate": "20",
    "api_burst": "40",
    "webhook_rate": "2",
    "webhook_burst": "5",
}


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path) -> Iterator[Synth]:
    yield synthesize("dev", tmp_path_factory.mktemp("cdk-caps"), stand_in_layer, **CHANGED)


def _reserved(synth: Synth) -> dict[str, Any]:
    """Each function's ReservedConcurrentExecutions (None when it has none)."""
    stack = synth.stack
    return {
        name: synth.raw["Resources"][logical_id(owner.function)]["Properties"].get(
            "ReservedConcurrentExecutions"
        )
        for name, owner in (
            ("webhook", stack.ingress),
            ("agent", stack.agent),
            ("consolidate", stack.consolidation),
        )
    }


def _event_source(synth: Synth) -> dict[str, Any]:
    (mapping,) = [
        r["Properties"]
        for r in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if r["Properties"]["FunctionName"] == {"Ref": logical_id(synth.stack.agent.function)}
    ]
    return mapping


def _stage(synth: Synth) -> dict[str, Any]:
    # The HTTP API's stage (the WebSocket API's: test_infra_websocket.py)
    http_api = {"Ref": logical_id(synth.stack.ingress.api)}
    (stage,) = [
        s
        for s in synth.resources("AWS::ApiGatewayV2::Stage").values()
        if s["Properties"]["ApiId"] == http_api
    ]
    return stage


def test_by_default_every_function_has_reserved_concurrency(each_stage: Synth) -> None:
    assert _reserved(each_stage) == {"webhook": 10, "agent": 5, "consolidate": 2}


def test_by_default_the_agents_event_source_runs_at_most_its_reserved_concurrency(each_stage: Synth) -> None:
    mapping = _event_source(each_stage)

    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 5}
    # Reserved below the event source's maximum would throttle it, and a throttled delivery counts
    # towards the lane's maxReceiveCount.
    assert _reserved(each_stage)["agent"] >= mapping["ScalingConfig"]["MaximumConcurrency"]


def test_by_default_every_route_is_throttled_and_the_turn_routes_tighter(each_stage: Synth) -> None:
    stage = _stage(each_stage)
    props = stage["Properties"]

    assert props["DefaultRouteSettings"] == {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100}
    assert props["RouteSettings"] == {
        key: {"ThrottlingRateLimit": 10, "ThrottlingBurstLimit": 20} for key in TURN_ROUTES
    }
    # The nine POST routes queue turns (web, each platform's unnamed route and its named routes');
    # the GETs (WhatsApp's handshakes, the outbox) and the uploads do not.
    assert len(TURN_ROUTES) == 9
    uploads = {"POST /media/{workspace}/uploads", "POST /media/{workspace}/uploads/{media_id}"}
    assert uploads == UPLOAD_ROUTES
    # Route settings name routes by key: the stage is created after every route.
    http_api = {"Ref": logical_id(each_stage.stack.ingress.api)}
    routes = {
        k
        for k, r in each_stage.resources("AWS::ApiGatewayV2::Route").items()
        if r["Properties"]["ApiId"] == http_api
    }
    assert routes <= set(stage.get("DependsOn", []))
    assert {
        r["Properties"]["RouteKey"] for r in each_stage.resources("AWS::ApiGatewayV2::Route").values()
    } >= (TURN_ROUTES)


def test_context_changes_each_cap(changed: Synth) -> None:
    # agent_concurrency sets the event source's maximum and the agent's reservation alike;
    # "none" removes a reservation.
    assert _reserved(changed) == {"webhook": None, "agent": 3, "consolidate": 4}
    assert _event_source(changed)["ScalingConfig"] == {"MaximumConcurrency": 3}
    props = _stage(changed)["Properties"]
    assert props["DefaultRouteSettings"] == {"ThrottlingRateLimit": 20, "ThrottlingBurstLimit": 40}
    assert props["RouteSettings"] == {
        key: {"ThrottlingRateLimit": 2, "ThrottlingBurstLimit": 5} for key in TURN_ROUTES
    }


def test_changed_caps_synthesise_with_nothing_unacknowledged(changed: Synth) -> None:
    report = changed.validation_report()

    assert [v["ruleName"] for plugin in report["pluginReports"] for v in plugin["violations"]] == []


def _caps(**context: Any) -> Caps:
    return read_caps(App(context=context).node)


def test_no_context_reads_as_the_defaults() -> None:
    assert _caps() == Caps()
    assert Caps().agent_reserved == Caps().agent_concurrency


@pytest.mark.parametrize("off", ["none", "None", "off", "0", 0])
def test_reserved_concurrency_none_removes_every_reservation_and_keeps_the_event_source_cap(
    off: object,
) -> None:
    caps = _caps(reserved_concurrency=off, agent_concurrency="7")

    assert (caps.agent_reserved, caps.webhook_reserved, caps.consolidate_reserved) == (None, None, None)
    assert caps.agent_concurrency == 7
    assert caps.api == Throttle(rate=50, burst=100)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"agent_concurrency": "1"}, "agent_concurrency must be between 2 and 1000"),
        ({"agent_concurrency": "none"}, "agent_concurrency must be a whole number"),
        ({"webhook_concurrency": "lots"}, "webhook_concurrency must be a whole number"),
        ({"api_rate": "0"}, "api_rate must be between 1"),
        ({"reserved_concurrency": "5"}, "reserved_concurrency takes only none"),
    ],
)
def test_a_bad_cap_is_refused_at_synth(context: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _caps(**context)
