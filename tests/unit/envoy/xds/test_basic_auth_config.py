"""Basic authentication in Envoy's config: a disabled filter on every manager, switched on
only by the routes that carry users (no cost elsewhere), and never a scoped manager (where
optional filters are all on and basic auth would refuse every request)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from podway.envoy.config import build
from podway.envoy.config.access import BASIC_AUTH_FILTER
from podway.envoy.xds.dump import files
from podway.ir import BasicAuth

from .helpers import http_listener, ir, pool, route, vhost

AUTH = BasicAuth(users=(("alice", "{SHA}" + "A" * 27 + "="),), realm="r", source="Secret x/y")


def _dump(model: Any, **kw: Any) -> dict[str, Any]:
    return {name: json.loads(text) for name, text in files(build(model, **kw)).items()}


def _managers(listeners: Any) -> list[dict[str, Any]]:
    out = []
    for item in listeners["resources"] if isinstance(listeners, dict) else listeners:
        for chain in [*item.get("filter_chains", ()), item.get("default_filter_chain") or {}]:
            out.extend(f["typed_config"] for f in chain.get("filters", ()))
    return out


def test_only_the_guarded_route_switches_basic_auth_on() -> None:
    guarded = replace(route("r/admin", "/admin", "p"), filters=(AUTH,))
    model = ir((http_listener(vhost("shop.test", guarded, route("r/open", "/", "p"))),),
               pool("p", 1))
    out = _dump(model)
    text = json.dumps(out["listeners.json"])
    assert BASIC_AUTH_FILTER in text
    for manager in _managers(out["listeners.json"]):
        item = next(f for f in manager["http_filters"] if f["name"] == BASIC_AUTH_FILTER)
        assert item["disabled"] is True
    routes = [r for table in _tables(out["routes.json"]) for v in table["virtual_hosts"]
              for r in v["routes"]]
    by_name = {r["name"]: r for r in routes}
    per_route = by_name["r/admin"]["typed_per_filter_config"][BASIC_AUTH_FILTER]
    assert per_route["users"]["inline_string"] == "alice:{SHA}" + "A" * 27 + "="
    assert BASIC_AUTH_FILTER not in by_name["r/open"].get("typed_per_filter_config", {})


def _tables(routes: Any) -> list[dict[str, Any]]:
    return list(routes["resources"] if isinstance(routes, dict) else routes)


def test_a_listener_with_basic_auth_is_not_served_as_scopes() -> None:
    """Three exact hosts with a scoped threshold of two: served as scopes, unless one route
    asks for credentials — then one RDS table, where the disabled filter stays off elsewhere."""
    hosts = [vhost(f"h{i}.test", route(f"r{i}", "/", "p")) for i in range(3)]
    plain = ir((http_listener(*hosts),), pool("p", 1))
    assert "scoped_routes" in json.dumps(_dump(plain, scoped_min_hosts=2)["listeners.json"])
    guarded = replace(hosts[0], routes=(replace(hosts[0].routes[0], filters=(AUTH,)),))
    model = ir((http_listener(guarded, *hosts[1:]),), pool("p", 1))
    text = json.dumps(_dump(model, scoped_min_hosts=2)["listeners.json"])
    assert "scoped_routes" not in text
    assert BASIC_AUTH_FILTER in text
