"""ListenerSets (GEP-1713) in the translator: who may attach (allowedListeners), listener
precedence between sets (age, then namespace/name), a parent that is not accepted, and the
incremental translator's result equal to a whole run while sets and their routes change."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

from .test_incremental_routes import _apply, _parsed, _Run

OPTS = TranslateOptions(address="198.18.0.1")


def _gateway(allowed: str | None, extra: str = "", cls: str = "podway") -> str:
    allowed_yaml = f"  allowedListeners: {allowed}\n" if allowed is not None else ""
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: infra, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  gatewayClassName: {cls}
{allowed_yaml}{extra}  listeners: [{{name: http, protocol: HTTP, port: 80, hostname: www.test}}]
"""


def _set(name: str, ns: str, created: str, host: str = "a.test", port: int = 80) -> str:
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}
spec:
  parentRef: {{name: gw, namespace: infra}}
  listeners: [{{name: http, protocol: HTTP, port: {port}, hostname: {host}}}]
"""


NAMESPACES = """apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {shared-gateway: "yes"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
"""


def _statuses(*docs: str) -> dict[str, Any]:
    snapshot = Snapshot.of_objects(load_text("---\n".join((OUR_CLASS_YAML, *docs))).objects)
    result = translate(snapshot, OPTS)
    return {str(ref): status for ref, status in result.statuses.items()}


def _accepted(status: Any) -> tuple[bool | None, str]:
    cond = next(c for c in status.conditions if c.type == "Accepted")
    return cond.status, cond.reason


def _conflicted(status: Any) -> list[bool]:
    return [any(c.type == "Conflicted" and c.status for c in ls.conditions)
            for ls in status.listeners]


@pytest.mark.parametrize(("a_created", "b_created", "loser"), [
    ("2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "team-b"),  # the older set wins
    ("2024-03-01T00:00:00Z", "2024-02-01T00:00:00Z", "team-a"),
    ("2024-02-01T00:00:00Z", "2024-02-01T00:00:00Z", "team-b"),  # same age: namespace/name
])
def test_the_older_set_keeps_a_hostname_both_claim(a_created: str, b_created: str,
                                                   loser: str) -> None:
    statuses = _statuses(_gateway("{namespaces: {from: All}}"),
                         _set("team-a", "team-a", a_created), _set("team-b", "team-b", b_created))
    for ns in ("team-a", "team-b"):
        assert _conflicted(statuses[f"ListenerSet/{ns}/{ns}"]) == [ns == loser]


@pytest.mark.parametrize(("allowed", "accepted"), [
    (None, {"team-a": "NotAllowed", "team-b": "NotAllowed"}),
    ("{namespaces: {from: None}}", {"team-a": "NotAllowed", "team-b": "NotAllowed"}),
    ("{namespaces: {from: Same}}", {"team-a": "NotAllowed", "team-b": "NotAllowed"}),
    ("{namespaces: {from: All}}", {"team-a": "Accepted", "team-b": "Accepted"}),
    ("{namespaces: {from: Selector, selector: {matchLabels: {shared-gateway: 'yes'}}}}",
     {"team-a": "Accepted", "team-b": "NotAllowed"}),
])
def test_allowed_listeners_decide_which_sets_attach(allowed: str | None,
                                                    accepted: dict[str, str]) -> None:
    statuses = _statuses(NAMESPACES, _gateway(allowed),
                         _set("team-a", "team-a", "2024-02-01T00:00:00Z", host="a.test"),
                         _set("team-b", "team-b", "2024-02-01T00:00:00Z", host="b.test"))
    got = {ns: _accepted(statuses[f"ListenerSet/{ns}/{ns}"])[1] for ns in accepted}
    assert got == accepted


def test_a_set_in_the_gateways_namespace_attaches_with_same() -> None:
    statuses = _statuses(_gateway("{namespaces: {from: Same}}"),
                         _set("local", "infra", "2024-02-01T00:00:00Z"))
    assert _accepted(statuses["ListenerSet/infra/local"]) == (True, "Accepted")


def test_a_parent_not_accepted_refuses_its_sets() -> None:
    """A Gateway asking for a Hostname address is not accepted: its set is ParentNotAccepted."""
    statuses = _statuses(_gateway("{namespaces: {from: All}}",
                                  "  addresses: [{type: Hostname, value: lb.test}]\n"),
                         _set("team-a", "team-a", "2024-02-01T00:00:00Z"))
    assert _accepted(statuses["ListenerSet/team-a/team-a"]) == (False, "ParentNotAccepted")


def _conditions(of: Any) -> dict[str, tuple[bool | None, str]]:
    return {c.type: (c.status, c.reason) for c in of.conditions}


def test_conflicts_as_the_conformance_suite_expects() -> None:
    """Gateway API v1.6.1 conformance (listenerset-hostname-conflict, -protocol-conflict): a
    set with one served listener and one conflicted is Accepted and Programmed=True/Programmed;
    a set whose every listener conflicts is ListenersNotValid on both; a conflicted listener
    says its conflict on Accepted, Programmed and Conflicted."""
    both = _set("team-a", "team-a", "2024-02-01T00:00:00Z").replace(
        "listeners: [", "listeners: [{name: own, protocol: HTTP, port: 80, hostname: own.test}, ")
    statuses = _statuses(_gateway("{namespaces: {from: All}}"), both,
                         _set("team-b", "team-b", "2024-03-01T00:00:00Z", host="www.test"),
                         _set("team-c", "team-c", "2024-03-02T00:00:00Z").replace(
                             "protocol: HTTP, port: 80", "protocol: TCP, port: 80"))
    team_a = statuses["ListenerSet/team-a/team-a"]
    assert _conditions(team_a)["Accepted"][0] is True
    assert _conditions(team_a)["Programmed"] == (True, "Programmed")
    for name, reason in (("team-b", "HostnameConflict"), ("team-c", "ProtocolConflict")):
        found = statuses[f"ListenerSet/{name}/{name}"]
        assert _conditions(found)["Accepted"] == (False, "ListenersNotValid")
        assert _conditions(found)["Programmed"] == (False, "ListenersNotValid")
        (listener,) = found.listeners
        assert {t: _conditions(listener)[t] for t in ("Accepted", "Programmed", "Conflicted")
                } == {"Accepted": (False, reason), "Programmed": (False, reason),
                      "Conflicted": (True, reason)}
    assert statuses["Gateway/infra/gw"].attached_listener_sets == 1


def test_a_set_whose_only_listener_is_refused_its_certificate_is_not_valid() -> None:
    """Conformance listenerset-reference-grant: the only listener's certificateRef crosses
    namespaces without a ReferenceGrant from ListenerSet: ResolvedRefs=False/RefNotPermitted,
    and the set Accepted=False and Programmed=False, both ListenersNotValid."""
    tls = _set("team-a", "team-a", "2024-02-01T00:00:00Z").replace(
        "protocol: HTTP, port: 80, hostname: a.test}",
        "protocol: HTTPS, port: 443, hostname: a.test, "
        "tls: {certificateRefs: [{name: cert, namespace: infra}]}}")
    statuses = _statuses(_gateway("{namespaces: {from: All}}"), tls)
    found = statuses["ListenerSet/team-a/team-a"]
    assert _conditions(found.listeners[0])["ResolvedRefs"] == (False, "RefNotPermitted")
    assert _conditions(found)["Accepted"] == (False, "ListenersNotValid")
    assert _conditions(found)["Programmed"] == (False, "ListenersNotValid")
    assert statuses["Gateway/infra/gw"].attached_listener_sets == 0


def test_incremental_translation_equals_a_whole_run_as_sets_change() -> None:
    """Sets and routes to them added, changed and deleted: every step's incremental result
    equals a translation from scratch (the memo keys on the sets too)."""
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": "app", "namespace": "team-a"},
             "spec": {"parentRefs": [{"kind": "ListenerSet", "name": "team-a"}],
                      "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]}}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": "team-a"},
               "spec": {"ports": [{"port": 80}]}}
    docs = [yaml.safe_load(t) for t in (
        _gateway("{namespaces: {from: All}}"),
        _set("team-a", "team-a", "2024-02-01T00:00:00Z"),
        _set("team-a", "team-a", "2024-02-01T00:00:00Z", host="c.test"),
        _set("team-b", "team-b", "2024-01-15T00:00:00Z"),
        _set("team-a", "team-a", "2024-02-01T00:00:00Z", port=8080))]
    gw, set_a, set_a_moved, set_b, set_a_port = docs
    route_b = {**route, "metadata": {"name": "app2", "namespace": "team-a"}}
    objects = [_parsed(doc) for doc in (yaml.safe_load(OUR_CLASS_YAML), gw, service)]
    snapshot = Snapshot.of_objects([o for o in objects if o is not None])
    run = _Run(snapshot)
    for step in [("put", set_a), ("put", route), ("put", set_b), ("put", set_a_moved),
                 ("put", route_b), ("put", set_a_port), ("delete", 0), ("put", set_a),
                 ("touch", 3)]:
        snapshot, changed = _apply(snapshot, step)
        run.step(snapshot, [changed] if changed is not None else [])
