"""``GatewayClassConfig.spec.defaults``: TrafficPolicy sections for every Gateway of a class, at
the lowest precedence (defaults < Gateway policy < route policy), refused whole when invalid."""

from __future__ import annotations

import pytest

from podway.ir import Forward, LBPolicy
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import IncrementalTranslator, Result, TranslateOptions, translate
from podway.translate.core.status import to_api

OPTS = TranslateOptions(address="198.18.0.1")


def gateway_class(name: str, config: str | None) -> str:
    ref = (f"  parametersRef: {{group: podway.io, kind: GatewayClassConfig, name: {config}}}\n"
           if config else "")
    return (f"apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n"
            f"metadata: {{name: {name}}}\n"
            f"spec:\n  controllerName: podway.io/gateway-controller\n{ref}")


def class_config(name: str, defaults: str) -> str:
    return (f"apiVersion: podway.io/v1alpha1\nkind: GatewayClassConfig\n"
            f"metadata: {{name: {name}}}\nspec:\n  defaults:\n{defaults}")


def gateway(name: str, cls: str, port: int) -> str:
    return (f"apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n"
            f"metadata: {{name: {name}, namespace: shop}}\n"
            f"spec:\n  gatewayClassName: {cls}\n"
            f"  listeners: [{{name: http, protocol: HTTP, port: {port}}}]\n")


def route(name: str, gw: str, service: str) -> str:
    return (f"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
            f"metadata: {{name: {name}, namespace: shop}}\n"
            f"spec:\n  parentRefs: [{{name: {gw}}}]\n"
            f"  rules: [{{backendRefs: [{{name: {service}, port: 80}}]}}]\n")


def service(name: str) -> str:
    return (f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\n"
            f"spec:\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: 80}}]\n")


def policy(name: str, kind: str, target: str, spec: str) -> str:
    group = "gateway.networking.k8s.io" if kind in ("Gateway", "HTTPRoute") else ""
    return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\n"
            f"metadata: {{name: {name}, namespace: shop}}\nspec:\n"
            f"  targetRefs: [{{group: '{group}', kind: {kind}, name: {target}}}]\n{spec}")


DEFAULTS = ("    timeouts: {connect: 2s, request: 10s, idle: 30s}\n"
            "    retry: {attempts: 3}\n"
            "    loadBalancer: {type: LeastRequest}\n")


def base(defaults: str = DEFAULTS) -> list[str]:
    """Class ``tuned`` (config ``tuned``) with Gateway shop/edge → route web → Service web;
    class ``plain`` (no parameters) with Gateway shop/other → route api → Service api."""
    return [gateway_class("tuned", "tuned"), class_config("tuned", defaults),
            gateway_class("plain", None),
            gateway("edge", "tuned", 8080), route("web", "edge", "web"), service("web"),
            gateway("other", "plain", 8081), route("api", "other", "api"), service("api")]


def snapshot(*docs: str) -> Snapshot:
    loaded = load_text("---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return Snapshot.of_objects(loaded.objects)


def run(*docs: str) -> Result:
    return translate(snapshot(*docs), OPTS)


def forward(result: Result, port: int) -> Forward:
    listener = next(ls for ls in result.ir.listeners if ls.port == port)
    action = listener.virtual_hosts[0].routes[0].action
    assert isinstance(action, Forward)
    return action


def class_condition(result: Result, name: str) -> dict[str, str]:
    status = next(s for ref, s in result.statuses.items()
                  if ref.kind == "GatewayClass" and ref.name == name)
    return next(c for c in to_api(status, kind="GatewayClass")["conditions"]
                if c["type"] == "Accepted")


def test_class_defaults_reach_the_pools_and_routes_of_the_class_gateways_only() -> None:
    """Connect timeout and algorithm (pool sections), request/idle timeouts and retry (route
    sections) come from the class defaults on the tuned class's Gateway; the plain class's
    Gateway, and its pool, keep Podway's own defaults."""
    result = run(*base())
    web = result.ir.pools["pool/shop/web/80"].settings
    api = result.ir.pools["pool/shop/api/80"].settings
    assert (web.connect_timeout_ms, web.lb_policy) == (2000, LBPolicy.LEAST_REQUEST)
    assert api.connect_timeout_ms != 2000
    assert api.lb_policy is not LBPolicy.LEAST_REQUEST
    tuned = forward(result, 8080)
    assert (tuned.timeout_ms, tuned.idle_timeout_ms) == (10_000, 30_000)
    assert tuned.retry is not None
    assert tuned.retry.attempts == 3
    plain = forward(result, 8081)
    assert (plain.timeout_ms, plain.idle_timeout_ms, plain.retry) == (None, None, None)
    assert class_condition(result, "tuned")["status"] == "True"


def test_precedence_defaults_below_gateway_policy_below_route_policy() -> None:
    """Field by field: the Gateway's TrafficPolicy beats the defaults (request timeout, connect
    timeout), the route's beats both (retry); what neither sets keeps the defaults' value
    (idle timeout, algorithm)."""
    result = run(*base(),
                 policy("gw", "Gateway", "edge", "  timeouts: {request: 5s, connect: 4s}\n"
                        "  retry: {attempts: 2}\n"),
                 policy("rt", "HTTPRoute", "web", "  retry: {attempts: 1}\n"))
    action = forward(result, 8080)
    assert (action.timeout_ms, action.idle_timeout_ms) == (5000, 30_000)
    assert action.retry is not None
    assert action.retry.attempts == 1
    web = result.ir.pools["pool/shop/web/80"].settings
    assert (web.connect_timeout_ms, web.lb_policy) == (4000, LBPolicy.LEAST_REQUEST)
    # The Gateway policy alone (no route policy): its retry beats the defaults'.
    gateway_only = forward(run(*base(), policy("gw", "Gateway", "edge",
                                               "  retry: {attempts: 2}\n")), 8080)
    assert gateway_only.retry is not None
    assert gateway_only.retry.attempts == 2


def test_a_service_policy_beats_the_class_defaults() -> None:
    """The pool's own Service sets its sections first: its policy's algorithm wins."""
    result = run(*base(), policy("svc", "Service", "web", "  loadBalancer: {type: Random}\n"))
    assert result.ir.pools["pool/shop/web/80"].settings.lb_policy is LBPolicy.RANDOM


@pytest.mark.parametrize(("defaults", "named"), [
    ("    timeouts: {request: soon}\n", "spec.defaults.timeouts.request"),
    ("    retry: {attempts: 99}\n", "spec.defaults.retry.attempts"),
    ("    security: {basicAuth: {users: {name: ops}}}\n", "spec.defaults.security"),
    ("    targetRefs: [{kind: Service, name: web}]\n", "spec.defaults.targetRefs"),
    ("    timeout: {request: 1s}\n", "spec.defaults.timeout"),
])
def test_invalid_defaults_refuse_the_class_naming_the_field(defaults: str, named: str) -> None:
    """A bad value, a section defaults do not take (security: fail closed) or a misspelt one:
    the class is Accepted=False/InvalidParameters naming the field; its Gateway is not served
    (no listener), the other class's still is."""
    result = run(*base(defaults))
    condition = class_condition(result, "tuned")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidParameters")
    assert named in condition["message"], condition["message"]
    assert [ls.port for ls in result.ir.listeners] == [8081]


def test_a_defaults_edit_is_picked_up_incrementally_and_equals_a_whole_run() -> None:
    """Changing the class defaults re-translates the class's pools and routes; the incremental
    result equals a whole translation, and so does removing the parameters."""
    inc = IncrementalTranslator(OPTS)
    inc.update(snapshot(*base()))
    changed = snapshot(*base("    timeouts: {connect: 3s, request: 7s}\n"))
    result = inc.update(changed)
    assert result.ir.pools["pool/shop/web/80"].settings.connect_timeout_ms == 3000
    assert forward(result, 8080).timeout_ms == 7000
    assert result == translate(changed, OPTS)
    # A route-only change (the patch path of the incremental translator) under class defaults.
    added = snapshot(*base("    timeouts: {connect: 3s, request: 7s}\n"),
                     route("shop", "edge", "api"))
    result = inc.update(added)
    assert result.ir.pools["pool/shop/api/80"].settings.connect_timeout_ms == 3000
    assert result == translate(added, OPTS)
    docs = base()
    docs[:2] = [gateway_class("tuned", None)]  # no parametersRef, no GatewayClassConfig
    without = snapshot(*docs)
    result = inc.update(without)
    assert forward(result, 8080).timeout_ms is None
    assert result == translate(without, OPTS)
