"""TrafficPolicy ``security``: basic auth on the routes of an HTTPRoute, an Ingress, a Gateway
or a Service's users; the route's own policy before its Gateway's; anything that cannot be
served as written refuses the targets' routes (403) with a condition, never leaves them open."""

from __future__ import annotations

import base64
import hashlib

from podway.ir import BasicAuth, DirectResponse, Forward, Route
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import IncrementalTranslator, Result, TranslateOptions, translate
from podway.translate.core.problems import Severity
from podway.translate.core.status import to_api
from tests import builders

GW = "gateway.networking.k8s.io"


def sha(password: str) -> str:
    return "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()


def secret(name: str, text: str, key: str = ".htpasswd") -> str:
    data = base64.b64encode(text.encode()).decode()
    return (f"apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: shop}}\n"
            f"data: {{{key!r}: {data}}}\n")


def policy(name: str, kind: str, target: str, security: str, *, group: str = GW,
           extra: str = "", ts: str = "2026-01-01T00:00:00Z") -> str:
    return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\n"
            f"metadata: {{name: {name}, namespace: shop, creationTimestamp: '{ts}'}}\n"
            f"spec:\n  targetRefs: [{{group: '{group}', kind: {kind}, name: {target}}}]\n"
            f"  security: {security}\n{extra}")


BASE = [builders.manifest(
    builders.gateway_class(), builders.gateway("edge", 8080, namespace="shop"),
    builders.http_route("admin", "admin.test", namespace="shop", parent_namespace="shop"),
    builders.http_route("open", "open.test", namespace="shop", parent_namespace="shop"),
    builders.service("web", 80, None, namespace="shop", protocol=None)),
    secret("staff", f"alice:{sha('a')}\ncarol:$apr1$x$y\n"), secret("ops", f"olga:{sha('o')}\n")]
STAFF = "{basicAuth: {users: {name: staff}}}"


def run(*docs: str) -> Result:
    loaded = load_text("---\n".join([*BASE, *docs]))
    assert not loaded.errors, loaded.errors
    return translate(Snapshot.of_objects(loaded.objects), TranslateOptions(address="198.18.0.1"))


def routes(result: Result) -> dict[str, Route]:
    return {v.hostname: r for lst in result.ir.listeners for v in lst.virtual_hosts
            for r in v.routes}


def users(route: Route) -> tuple[str, ...]:
    found = [f for f in route.filters if isinstance(f, BasicAuth)]
    assert len(found) == 1, route.filters
    return tuple(name for name, _ in found[0].users)


def conditions(result: Result, name: str) -> list[tuple[str, str, str]]:
    status = next(s for ref, s in result.statuses.items()
                  if ref.kind == "TrafficPolicy" and ref.name == name)
    api = to_api(status, kind="TrafficPolicy")
    return [(c["type"], c["status"], c["reason"]) for c in api["ancestors"][0]["conditions"]]


def test_a_route_policy_guards_only_that_routes_requests() -> None:
    result = run(policy("p", "HTTPRoute", "admin", STAFF))
    found = routes(result)
    assert users(found["admin.test"]) == ("alice",)
    assert isinstance(found["admin.test"].action, Forward)
    assert not found["open.test"].filters
    assert conditions(result, "p") == [("Accepted", "True", "Accepted"),
                                       ("ResolvedRefs", "True", "ResolvedRefs")]
    warning = [p for p in result.problems if p.ref.kind == "TrafficPolicy"]
    assert [p.severity for p in warning] == [Severity.WARNING]  # carol's apr1 hash
    assert "'carol'" in warning[0].message


def test_a_gateway_policy_guards_every_route_and_a_route_policy_wins_over_it() -> None:
    result = run(policy("gw", "Gateway", "edge", "{basicAuth: {users: {name: ops}}}"),
                 policy("p", "HTTPRoute", "admin", STAFF))
    found = routes(result)
    assert users(found["admin.test"]) == ("alice",)
    assert users(found["open.test"]) == ("olga",)


def test_a_service_policy_guards_the_routes_that_forward_to_it() -> None:
    result = run(policy("s", "Service", "web", STAFF, group=""))
    assert all(users(r) == ("alice",) for r in routes(result).values())


def test_what_cannot_be_served_refuses_the_targets_routes() -> None:
    """A missing Secret (ResolvedRefs False), a Secret with no usable user, a mechanism not
    built (jwt), an empty section, a bad value elsewhere in the policy: 403, never open."""
    cases = [
        ("{basicAuth: {users: {name: nowhere}}}", "", ("ResolvedRefs", "False",
                                                      "SecretNotFound")),
        ("{basicAuth: {users: {name: apr}}}", "", ("ResolvedRefs", "False", "InvalidSecret")),
        ("{basicAuth: {users: {name: staff, namespace: other}}}", "",
         ("ResolvedRefs", "False", "RefNotPermitted")),
        ("{jwt: {providers: []}, basicAuth: {users: {name: staff}}}", "", None),
        ("{}", "", None),
        (STAFF, "  retry: {attempts: -1}\n", ("Accepted", "False", "Invalid")),
    ]
    for security, extra, condition in cases:
        result = run(secret("apr", "carol:$apr1$x$y\n"),
                     policy("p", "HTTPRoute", "admin", security, extra=extra))
        found = routes(result)
        assert found["admin.test"].action == DirectResponse(status=403), security
        assert isinstance(found["open.test"].action, Forward)
        errors = [p for p in result.problems if p.severity is Severity.ERROR]
        assert errors, (security, result.problems)
        if condition is not None:
            assert condition in conditions(result, "p"), conditions(result, "p")


def test_a_newer_policy_that_lost_the_target_still_secures_it() -> None:
    """An older TrafficPolicy holds the route's timeouts: the newer one with security is
    Conflicted for its other sections, yet its security applies (with a warning saying so)."""
    older = ("apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: t, "
             "namespace: shop, creationTimestamp: '2025-01-01T00:00:00Z'}\nspec:\n"
             f"  targetRefs: [{{group: {GW}, kind: HTTPRoute, name: admin}}]\n"
             "  timeouts: {request: 5s}\n")
    result = run(older, policy("p", "HTTPRoute", "admin", STAFF))
    assert users(routes(result)["admin.test"]) == ("alice",)
    assert ("Accepted", "False", "Conflicted") in conditions(result, "p")
    assert any("security section applies" in p.message for p in result.problems)


def test_a_secret_edit_reaches_the_routes_incrementally() -> None:
    """The Secret gains a user: the incremental translation equals a full one."""
    options = TranslateOptions(address="198.18.0.1")
    inc = IncrementalTranslator(options)
    first = load_text("---\n".join([*BASE, policy("p", "HTTPRoute", "admin", STAFF)]))
    inc.update(Snapshot.of_objects(first.objects))
    edited = [*BASE[:1], secret("staff", f"alice:{sha('a')}\nbob:{sha('b')}\n"), BASE[2],
              policy("p", "HTTPRoute", "admin", STAFF)]
    snapshot = Snapshot.of_objects(load_text("---\n".join(edited)).objects)
    result = inc.update(snapshot)
    assert users(routes(result)["admin.test"]) == ("alice", "bob")
    assert result == translate(snapshot, options)


def test_an_ingress_policy_guards_the_ingress_routes() -> None:
    ingress = builders.manifest(builders.ingress("shop", namespace="shop", class_name="podway",
                                                 host="shop.example.com"))
    result = run(ingress, policy("i", "Ingress", "shop", STAFF, group="networking.k8s.io"))
    assert users(routes(result)["shop.example.com"]) == ("alice",)
    assert not routes(result)["open.test"].filters


AUTHZ = builders.manifest(builders.service("authz", 9000, None, namespace="shop", protocol=None))


def test_ext_auth_asks_a_service_of_the_policy_namespace() -> None:
    """security.extAuth: the route carries the check, the auth Service's pool joins the IR
    (gRPC: an HTTP/2 pool); basicAuth and extAuth together both apply."""
    from podway.ir import ExtAuth

    result = run(AUTHZ, policy("p", "HTTPRoute", "admin", "{extAuth: {backendRef: {name: authz, "
                               "port: 9000}, path: /check, allowedResponseHeaders: [x-user]}}"),
                 policy("g", "HTTPRoute", "open", "{extAuth: {protocol: GRPC, backendRef: "
                        "{name: authz, port: 9000}, timeout: 500ms}, basicAuth: {users: "
                        "{name: ops}}}"))
    found = routes(result)
    checks = [f for f in found["admin.test"].filters if isinstance(f, ExtAuth)]
    assert checks == [ExtAuth(pool="pool/shop/authz/9000", path_prefix="/check",
                              response_headers=("x-user",))]
    both = found["open.test"].filters
    assert [type(f).__name__ for f in both] == ["BasicAuth", "ExtAuth"]
    assert both[1] == ExtAuth(pool="pool/shop/authz/9000/grpc", grpc=True, timeout_ms=500)
    assert {"pool/shop/authz/9000", "pool/shop/authz/9000/grpc"} <= set(result.ir.pools)
    assert ("ResolvedRefs", "True", "ResolvedRefs") in conditions(result, "p")


def test_ext_auth_without_its_service_refuses() -> None:
    result = run(policy("p", "HTTPRoute", "admin", "{extAuth: {backendRef: {name: authz, "
                        "port: 9000}}}"))
    assert routes(result)["admin.test"].action == DirectResponse(status=403)
    assert ("ResolvedRefs", "False", "BackendNotFound") in conditions(result, "p")
    result = run(AUTHZ, policy("p", "HTTPRoute", "admin", "{extAuth: {protocol: SOAP, "
                               "backendRef: {name: authz, port: 9000}}}"))
    assert routes(result)["admin.test"].action == DirectResponse(status=403)
    assert ("Accepted", "False", "Invalid") in conditions(result, "p")


def test_authorization_rules_reach_the_route_and_bad_ones_refuse() -> None:
    from podway.ir import AccessRule, Authorization

    rules = ("{authorization: {defaultAction: Deny, rules: [{action: Deny, principal: {headers: "
             "[{name: X-Block, values: ['yes']}]}}, {action: Allow, principal: {clientCIDRs: "
             "[10.0.0.0/8]}, methods: [get]}]}}")
    result = run(policy("p", "HTTPRoute", "admin", rules))
    found = [f for f in routes(result)["admin.test"].filters if isinstance(f, Authorization)]
    assert found == [Authorization(rules=(
        AccessRule(allow=False, headers=(("x-block", ("yes",)),)),
        AccessRule(allow=True, cidrs=("10.0.0.0/8",), methods=("GET",))),
        source="TrafficPolicy shop/p")]
    for bad in ("{authorization: {defaultAction: Maybe}}",
                "{authorization: {rules: [{action: Allow, principal: {clientCIDRs: [nope]}}]}}",
                "{authorization: {rules: [{action: Allow, principal: {jwt: {claims: []}}}]}}"):
        result = run(policy("p", "HTTPRoute", "admin", bad))
        assert routes(result)["admin.test"].action == DirectResponse(status=403), bad
        assert ("Accepted", "False", "Invalid") in conditions(result, "p")


def test_an_external_auth_filter_added_incrementally_equals_a_full_translation() -> None:
    """An HTTPRoute edit that adds an ExternalAuth filter (the patch path of Gateway
    translation): the auth pool joins, as in a full translation."""
    options = TranslateOptions(address="198.18.0.1")
    inc = IncrementalTranslator(options)
    inc.update(Snapshot.of_objects(load_text("---\n".join([*BASE, AUTHZ])).objects))
    rules = [{"backendRefs": [{"name": "web", "port": 80}], "filters": [{
        "type": "ExternalAuth", "externalAuth": {
            "protocol": "HTTP", "backendRef": {"name": "authz", "port": 9000}}}]}]
    edited = builders.manifest(
        builders.gateway_class(), builders.gateway("edge", 8080, namespace="shop"),
        builders.http_route("admin", "admin.test", namespace="shop", parent_namespace="shop",
                            rules=rules),
        builders.http_route("open", "open.test", namespace="shop", parent_namespace="shop"),
        builders.service("web", 80, None, namespace="shop", protocol=None))
    docs = [edited, *BASE[1:], AUTHZ]
    snapshot = Snapshot.of_objects(load_text("---\n".join(docs)).objects)
    result = inc.update(snapshot)
    assert "pool/shop/authz/9000" in result.ir.pools
    assert result == translate(snapshot, options)
