"""RouteStore contract: the channel routes `sigil config apply` writes and the webhook reads."""

from __future__ import annotations

from shared.models import ChannelRoute, ChatOverride

from .conftest import OpenBackend
from .factories import ContractBackend


def _route(platform: str, name: str, workspace: str, **fields: object) -> ChannelRoute:
    return ChannelRoute.model_validate({"platform": platform, "name": name, "workspace": workspace, **fields})


def test_route_round_trip_update_and_delete(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    store = contract.backend.routes
    assert store.get("telegram", "family") is None

    route = _route(
        "telegram",
        "family",
        ws_a,
        account="7012345678",
        chats={"-1001234": ChatOverride(workspace=ws_b), "42": ChatOverride(model="openai/gpt-4.1")},
    )
    store.put(route)
    assert store.get("telegram", "family") == route
    # Keyed by (platform, name): the same name on another platform is another route.
    assert store.get("slack", "family") is None

    moved = route.model_copy(update={"workspace": ws_b, "chats": {}})
    store.put(moved)
    assert store.get("telegram", "family") == moved
    assert store.list_routes() == [moved]

    assert store.delete("telegram", "family") is True
    assert store.get("telegram", "family") is None
    assert store.delete("telegram", "family") is False
    assert store.list_routes() == []


def test_list_routes_in_platform_then_name_order(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.routes
    routes = [
        _route("telegram", "team", ws_a),
        _route("slack", "acme", ws_a, account="T0123"),
        _route("telegram", "family", ws_a),
        _route("whatsapp", "shop", ws_a, account="1234567890"),
    ]
    for route in routes:
        store.put(route)
    listed = store.list_routes()
    assert [r.key for r in listed] == ["slack/acme", "telegram/family", "telegram/team", "whatsapp/shop"]
    assert listed[0] == routes[1]


def test_routes_survive_a_restart(open_backend: OpenBackend, ws_a: str) -> None:
    route = _route("discord", "guild", ws_a, account="1122334455")
    with open_backend() as first:
        first.backend.routes.put(route)
    with open_backend() as second:
        assert second.backend.routes.list_routes() == [route]
