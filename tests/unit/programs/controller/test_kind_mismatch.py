"""A GatewayClass's engineKind against the engines serving its Gateways: a Warning per Gateway
when they differ, once per mismatch."""

from __future__ import annotations

from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.loader import load_text
from podway.programs.controller.kind_mismatch import REASON, KindMismatches, mismatches

CONTROLLER = "podway.io/gateway-controller"
EDGE = ObjectRef("Gateway", "shop", "edge")


def snapshot(kind: str | None, group: str | None = "edge") -> Snapshot:
    """Class ``tuned`` (GatewayClassConfig ``tuned``: engineGroup, engineKind) with Gateway
    shop/edge; class ``plain`` (no parameters) with Gateway shop/other."""
    spec = {k: v for k, v in (("engineGroup", group), ("engineKind", kind)) if v}
    docs = [
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: tuned}\n"
        f"spec:\n  controllerName: {CONTROLLER}\n"
        "  parametersRef: {group: podway.io, kind: GatewayClassConfig, name: tuned}\n",
        "apiVersion: podway.io/v1alpha1\nkind: GatewayClassConfig\nmetadata: {name: tuned}\n"
        f"spec: {spec}\n",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: plain}\n"
        f"spec:\n  controllerName: {CONTROLLER}\n",
        *(f"apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n"
          f"metadata: {{name: {name}, namespace: shop}}\n"
          f"spec:\n  gatewayClassName: {cls}\n"
          f"  listeners: [{{name: http, protocol: HTTP, port: 80}}]\n"
          for name, cls in (("edge", "tuned"), ("other", "plain")))]
    loaded = load_text("---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return Snapshot.of_objects(loaded.objects)


def test_engines_of_another_kind_in_the_gateways_group_are_named() -> None:
    """A HAProxy class whose group is served by an Envoy: the Gateway is named, with the
    engine; an engine of another group is not counted, one without a group (it serves
    everything) is; the plain class's Gateway never is."""
    found = mismatches(snapshot("haproxy"), controller_name=CONTROLLER, configured={},
                       engines={"e1": ("edge", "envoy"), "e2": ("shop", "envoy"),
                                "h1": ("edge", "haproxy")})
    assert list(found) == [EDGE]
    assert "meant for haproxy" in found[EDGE]
    assert "e1 (envoy)" in found[EDGE]
    assert "e2" not in found[EDGE]
    everything = mismatches(snapshot("haproxy"), controller_name=CONTROLLER, configured={},
                            engines={"all": ("", "envoy")})
    assert "all (envoy)" in everything[EDGE]


def test_matching_engines_or_no_kind_said_is_no_mismatch() -> None:
    assert mismatches(snapshot("haproxy"), controller_name=CONTROLLER, configured={},
                      engines={"h1": ("edge", "haproxy")}) == {}
    assert mismatches(snapshot(None), controller_name=CONTROLLER, configured={},
                      engines={"e1": ("edge", "envoy"), "h1": ("edge", "haproxy")}) == {}
    assert mismatches(snapshot("envoy"), controller_name="example.com/other", configured={},
                      engines={"h1": ("edge", "haproxy")}) == {}


def test_a_group_configured_for_another_kind_is_a_mismatch_without_engines() -> None:
    """engineGroups pins the Gateway's group (here the class's engineGroup; without one,
    ``default``) to another kind: engines of the class's kind would be refused there."""
    found = mismatches(snapshot("haproxy"), controller_name=CONTROLLER,
                       configured={"edge": "envoy"}, engines={})
    assert "configured for envoy engines" in found[EDGE]
    by_default = mismatches(snapshot("envoy", group=None), controller_name=CONTROLLER,
                            configured={"default": "haproxy"}, engines={})
    assert "'default'" in by_default[EDGE]


def test_a_warning_is_due_once_per_mismatch_and_again_after_reset() -> None:
    tracker = KindMismatches(controller_name=CONTROLLER)
    snap, engines = snapshot("haproxy"), {"e1": ("edge", "envoy")}
    first = tracker.due(snap, configured={}, engines=engines)
    assert [(d.ref, d.type, d.reason) for d in first] == [(EDGE, "Warning", REASON)]
    assert tracker.due(snap, configured={}, engines=engines) == []
    assert tracker.due(snap, configured={}, engines={}) == []  # gone: nothing to say
    assert len(tracker.due(snap, configured={}, engines=engines)) == 1  # back: said again
    tracker.reset()
    assert len(tracker.due(snap, configured={}, engines=engines)) == 1
