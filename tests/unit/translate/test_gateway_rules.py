"""Gateway API rules in isolation: hostname intersection, precedence keys, references, parsing."""

from __future__ import annotations

import pytest

from podway.ir import Forward, PathKind
from podway.ir.evaluate import Request, path_matches, select_route
from podway.model import Snapshot
from podway.model.gateway import LabelSelector, ReferenceGrant
from podway.model.gateway_routes import GRPCRouteMatch, HTTPRoute
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate
from podway.translate.gateway.attach import intersect
from podway.translate.gateway.filters import RedirectSpec, duration_ms
from podway.translate.gateway.httproute import compile_route
from podway.translate.gateway.matches import grpc_match
from podway.translate.gateway.refs import ReferenceGrants, RefIssue
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

CLASS_AND_GATEWAY = OUR_CLASS_YAML + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: podway
  listeners: [{name: http, protocol: HTTP, port: 80, hostname: "*.example.com"}]
---
apiVersion: v1
kind: Service
metadata: {name: svc}
spec: {ports: [{port: 80}]}
"""


@pytest.mark.parametrize(("listener", "route", "expected"), [
    (None, (), ("*",)),
    ("a.example.com", (), ("a.example.com",)),
    (None, ("a.example.com",), ("a.example.com",)),
    ("*.example.com", ("a.b.example.com",), ("a.b.example.com",)),
    ("*.example.com", ("example.com",), ()),
    ("*.example.com", ("*.b.example.com",), ("*.b.example.com",)),
    ("a.example.com", ("*.example.com",), ("a.example.com",)),
    ("*.b.example.com", ("*.example.com",), ("*.b.example.com",)),
    ("a.example.com", ("b.example.com",), ()),
    ("*.example.com", ("x.example.org", "y.example.com"), ("y.example.com",)),
])
def test_hostname_intersection(listener: str | None, route: tuple[str, ...],
                               expected: tuple[str, ...]) -> None:
    """Route and listener hostnames intersect as the spec says (wildcards: any label depth)."""
    assert intersect(listener, route) == expected


@pytest.mark.parametrize(("text", "ms"), [("1h", 3_600_000), ("1m30s", 90_000), ("2s500ms", 2500),
                                          ("0s", 0), ("1h2m3s4ms", 3_723_004)])
def test_durations_parse(text: str, ms: int) -> None:
    """Gateway API durations convert to milliseconds."""
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1", "1d", "1.5s", "-1s", "1s ", "123456s"])
def test_bad_durations_are_rejected(text: str) -> None:
    """Anything outside the Gateway API duration grammar is a ValueError."""
    with pytest.raises(ValueError, match="duration"):
        duration_ms(text)


def test_redirect_port_follows_the_spec() -> None:
    """Explicit port, else the scheme's well-known port, else the listener's; a port that is
    well-known for the resulting scheme is left out of Location (None)."""
    base = {"hostname": None, "path": None, "prefix": None, "status_code": 302}

    def port(scheme: str | None, given: int | None, listener: int, listener_scheme: str = "http"
             ) -> int | None:
        spec = RedirectSpec(scheme=scheme, port=given, **base)
        return spec.build(listener_port=listener, listener_scheme=listener_scheme).port

    assert port(None, None, 8080) == 8080
    assert port(None, None, 80) is None
    assert port(None, None, 443, "https") is None
    assert port(None, None, 80, "https") == 80
    assert port("https", None, 80) is None
    assert port("http", None, 8443, "https") is None
    assert port("https", 8443, 80) == 8443
    assert port("http", 443, 80) == 443


def test_label_selector_semantics() -> None:
    """matchLabels and every matchExpressions operator behave as in Kubernetes."""
    sel = LabelSelector.model_validate({
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "stage"]},
                             {"key": "legacy", "operator": "DoesNotExist"},
                             {"key": "tier", "operator": "NotIn", "values": ["db"]}]})
    assert sel.matches({"team": "a", "env": "prod"})
    assert not sel.matches({"team": "b", "env": "prod"})
    assert not sel.matches({"team": "a", "env": "dev"})
    assert not sel.matches({"team": "a", "env": "prod", "legacy": "x"})
    assert not sel.matches({"team": "a", "env": "prod", "tier": "db"})
    assert LabelSelector().matches({"anything": "goes"})


def test_reference_grant_needs_matching_from_and_to() -> None:
    """A grant must live in the target namespace and name the referrer and the target."""
    grant = ReferenceGrant.model_validate({
        "metadata": {"name": "g", "namespace": "backends"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                           "namespace": "apps"}],
                 "to": [{"group": "", "kind": "Service", "name": "api"}]}})
    grants = ReferenceGrants({grant.key: grant})
    ask = {"from_group": "gateway.networking.k8s.io", "from_kind": "HTTPRoute",
           "from_namespace": "apps", "to_group": "", "to_kind": "Service",
           "to_namespace": "backends", "to_name": "api"}
    assert grants.permits(**ask)
    assert not grants.permits(**{**ask, "to_name": "db"})
    assert not grants.permits(**{**ask, "from_kind": "GRPCRoute"})
    assert not grants.permits(**{**ask, "from_namespace": "other"})
    assert not grants.permits(**{**ask, "to_namespace": "elsewhere"})
    assert grants.permits(**{**ask, "to_namespace": "apps"})  # same namespace needs no grant


def _route(rules: str) -> HTTPRoute:
    text = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r}}
spec:
  rules:
{rules}"""
    [route] = load_text(text).objects
    assert isinstance(route, HTTPRoute)
    return route


def test_precedence_keys_order_matches_as_the_spec_lists() -> None:
    """Exact > regex > longer prefix > method > more headers > more query params > rule order."""
    route = _route("""
  - matches:
    - {path: {type: PathPrefix, value: /a}}
    - {path: {type: PathPrefix, value: /a}, queryParams: [{name: q, value: "1"}]}
    - {path: {type: PathPrefix, value: /a}, headers: [{name: h, value: "1"}]}
    - {path: {type: PathPrefix, value: /a}, method: GET, queryParams: [{name: q, value: "1"}]}
    - {path: {type: PathPrefix, value: /a/b}}
    - {path: {type: RegularExpression, value: "/a.*"}}
    - {path: {type: Exact, value: /a}}
  - matches: [{path: {type: PathPrefix, value: /a}}]
""")
    compiled = compile_route(route, lambda ref: RefIssue("BackendNotFound", "none"))
    ordered = [m.name.split("/rule/")[1] for m in sorted(compiled.matches, key=lambda m: m.key)]
    assert ordered == ["0/match/6", "0/match/5", "0/match/4", "0/match/3", "0/match/2",
                       "0/match/1", "0/match/0", "1/match/0"]


def test_prefix_matches_are_normalised_without_trailing_slash() -> None:
    """PathPrefix /a/ is the element-wise prefix /a (the IR matches whole path elements)."""
    route = _route("  - matches: [{path: {type: PathPrefix, value: /a/}}]\n")
    [m] = compile_route(route, lambda ref: RefIssue("BackendNotFound", "none")).matches
    assert (m.match.path.kind, m.match.path.value) == (PathKind.PREFIX, "/a")


def test_attached_routes_count_only_accepted_routes() -> None:
    """attachedRoutes counts Accepted=True routes only (gateway-api#4341): neither a route whose
    hostnames miss the listener nor one whose rules are all invalid is counted."""
    routes = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: fits}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.example.com]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: misses}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.example.org]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: broken}
spec:
  parentRefs: [{name: gw}]
  hostnames: [b.example.com]
  rules: [{matches: [{path: {value: no-slash}}], backendRefs: [{name: svc, port: 80}]}]
"""
    result = translate(Snapshot.of_objects(load_text(CLASS_AND_GATEWAY + routes).objects))
    gateway = next(s for r, s in result.statuses.items() if r.kind == "Gateway")
    assert gateway.listeners[0].attached_routes == 1
    for name, reason in (("misses", "NoMatchingListenerHostname"),
                         ("broken", "UnsupportedValue")):
        status = next(s for r, s in result.statuses.items() if r.name == name)
        accepted = status.parents[0].conditions[0]
        assert (name, accepted.type, accepted.status, accepted.reason) == (
            name, "Accepted", False, reason)


def test_unresolved_share_keeps_its_weight_as_500() -> None:
    """An unresolvable backendRef's weight is answered with 500, next to the good share."""
    routes = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: split}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: svc, port: 80, weight: 3}, {name: gone, port: 80, weight: 1}]}]
"""
    result = translate(Snapshot.of_objects(load_text(CLASS_AND_GATEWAY + routes).objects))
    [vhost] = result.ir.listeners[0].virtual_hosts
    action = vhost.routes[0].action
    assert isinstance(action, Forward)
    assert [(b.pool, b.weight, b.status) for b in action.backends] == [
        ("pool/default/svc/80", 3, 500), (None, 1, 500)]


def test_address_without_value_binds_the_default_address() -> None:
    """spec.addresses entry with no value asks for an address: the bind address is used."""
    text = CLASS_AND_GATEWAY.replace(
        "  gatewayClassName: podway\n",
        "  gatewayClassName: podway\n  addresses: [{type: IPAddress}]\n")
    result = translate(Snapshot.of_objects(load_text(text).objects),
                       TranslateOptions(address="198.18.0.9"))
    assert [lst.address for lst in result.ir.listeners] == ["198.18.0.9"]
    gateway = next(s for r, s in result.statuses.items() if r.kind == "Gateway")
    assert gateway.addresses == (("IPAddress", "198.18.0.9"),)


def test_incremental_endpoint_change_keeps_gateway_routes_and_statuses() -> None:
    """An EndpointSlice change re-resolves members only: listeners and statuses stay identical."""
    from podway.model import EndpointSlice
    from podway.translate import IncrementalTranslator

    routes = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
"""
    snapshot = Snapshot.of_objects(load_text(CLASS_AND_GATEWAY + routes).objects)
    inc = IncrementalTranslator(TranslateOptions(address="198.18.0.1"))
    first = inc.update(snapshot)
    eps = EndpointSlice.model_validate({
        "metadata": {"name": "svc-1", "labels": {"kubernetes.io/service-name": "svc"}},
        "ports": [{"port": 8080}], "endpoints": [{"addresses": ["198.18.1.1"]}]})
    second = inc.update(snapshot.replace(EndpointSlice.KIND, {eps.key: eps}))
    assert second.ir.listeners is first.ir.listeners
    assert second.statuses == first.statuses
    assert [m.address for m in second.ir.pools["pool/default/svc/80"].members] == ["198.18.1.1"]


@pytest.mark.parametrize(("method", "path", "expected"), [
    ({"type": "RegularExpression", "service": "a\\.A|a\\.B", "method": "Get|Put"},
     "/a.B/Get", True),
    ({"type": "RegularExpression", "service": "a\\.A|a\\.B", "method": "Get|Put"},
     "Put", False),
    ({"type": "RegularExpression", "service": "a\\.A|a\\.B", "method": "Get|Put"},
     "/a.A/Delete", False),
    ({"type": "RegularExpression", "method": "Get|Put"}, "/any.Svc/Put", True),
    ({"type": "RegularExpression", "service": "x|y"}, "/y/Any", True),
    ({"service": ".pkg.Svc"}, "/.pkg.Svc/M", True),
    ({"method": "Get"}, "/pkg.Svc/Get", True),
])
def test_grpc_method_match_paths(method: dict[str, str], path: str, expected: bool) -> None:
    """A gRPC method match selects exactly the /service/method paths its parts describe."""
    m = grpc_match(GRPCRouteMatch.model_validate({"method": method}))
    assert path_matches(m.path, path) is expected


@pytest.mark.parametrize("method", [
    {"type": "RegularExpression"}, {"type": "Exact"}, {"service": "a..b"},
    {"service": "pkg.Svc", "method": "a.b"},
])
def test_grpc_method_match_rejects_what_the_schema_rejects(method: dict[str, str]) -> None:
    """Neither service nor method, or Exact names outside the schema's patterns, are rejected."""
    with pytest.raises(ValueError, match="gRPC"):
        grpc_match(GRPCRouteMatch.model_validate({"method": method}))


@pytest.mark.parametrize(("request_timeout", "backend", "expected"), [
    ("10s", "0s", (10_000, 0)),
    ("0s", "30s", (0, 30_000)),
    ("10s", "10s", (10_000, 10_000)),
    ("10s", "11s", None),
])
def test_backend_request_timeout_may_be_zero_but_not_exceed_request(
        request_timeout: str, backend: str, expected: tuple[int, int] | None) -> None:
    """backendRequest "0s" (no timeout) is valid under any request timeout; only a non-zero
    backendRequest above a non-zero request timeout rejects the rule."""
    route = _route(f"""  - timeouts: {{request: {request_timeout}, backendRequest: {backend}}}
    backendRefs: [{{name: svc, port: 80}}]
""")
    compiled = compile_route(route, lambda ref: RefIssue("BackendNotFound", "none"))
    if expected is None:
        assert compiled.rules_dropped == 1
        return
    action = compiled.matches[0].action
    assert isinstance(action, Forward)
    assert (action.timeout_ms, action.backend_timeout_ms) == expected


def test_equal_age_ties_break_by_namespace_slash_name() -> None:
    """Of two equally old routes with the same match, "team-b/a" wins over "team/z" (the spec
    orders "{namespace}/{name}" strings; comparing (namespace, name) pairs would not)."""
    gateway = CLASS_AND_GATEWAY.replace(
        'hostname: "*.example.com"}', 'hostname: "*.example.com", '
        "allowedRoutes: {namespaces: {from: All}}}")
    routes = "".join(f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  parentRefs: [{{name: gw, namespace: default}}]
  hostnames: [a.example.com]
  rules: [{{matches: [{{path: {{value: /x}}}}]}}]
""" for ns, name in (("team", "z"), ("team-b", "a")))
    result = translate(Snapshot.of_objects(load_text(gateway + routes).objects))
    vhost = next(v for v in result.ir.listeners[0].virtual_hosts
                 if v.hostname == "a.example.com")
    assert [str(r.origin) for r in vhost.routes] == ["HTTPRoute/team-b/a", "HTTPRoute/team/z"]


def test_prefix_length_counts_the_trailing_slash_as_written() -> None:
    """PathPrefix "/foo/" outranks an earlier "/foo" (more characters as written); both still
    match "/foo" itself, element-wise."""
    routes = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.example.com]
  rules:
  - matches: [{path: {value: /foo}}]
    backendRefs: [{name: svc, port: 80}]
  - matches: [{path: {value: /foo/}}]
    backendRefs: [{name: svc, port: 80}]
"""
    result = translate(Snapshot.of_objects(load_text(CLASS_AND_GATEWAY + routes).objects))
    [listener] = result.ir.listeners
    for path in ("/foo", "/foo/bar"):
        chosen = select_route(listener, Request(host="a.example.com", path=path))
        assert chosen is not None
        assert (path, chosen.name) == (path, "httproute/default/r/rule/1/match/0")


def test_regex_envoy_would_refuse_drops_only_its_rule() -> None:
    """A lookahead (valid in Python, not in RE2) drops its rule with a reason; others serve."""
    route = _route("""
  - matches: [{path: {type: RegularExpression, value: "/(?!admin).*"}}]
  - matches: [{path: {type: PathPrefix, value: /ok}}]
""")
    compiled = compile_route(route, lambda ref: RefIssue("BackendNotFound", "none"))
    assert [m.name.split("/rule/")[1] for m in compiled.matches] == ["1/match/0"]
    assert compiled.rules_dropped == 1
    assert any("not a valid RE2" in str(issue) for issue in compiled.issues)
