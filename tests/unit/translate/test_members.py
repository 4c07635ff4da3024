"""Member resolution details: deterministic duplicates, and serving-while-terminating fallback."""

from __future__ import annotations

from typing import Any

from podway.ir import MemberState
from podway.model import EndpointSlice, K8sObject, Service, Snapshot
from podway.translate import IncrementalTranslator, TranslateOptions, translate
from tests import builders

OPTS = TranslateOptions(address="198.18.0.1")


def lb_service() -> Service:
    return Service.model_validate({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})


def endpoint_slice(name: str, *endpoints: dict[str, Any]) -> EndpointSlice:
    return EndpointSlice.model_validate(builders.endpoint_slice(
        "web", name=name, namespace="ns", port_name=None, endpoints=endpoints))


def members(objects: list[K8sObject]) -> list[tuple[str, MemberState, str]]:
    pool = translate(Snapshot.of_objects(objects), OPTS).ir.pools["pool/ns/web/80/tcp"]
    return [(m.address, m.state, str(m.origin)) for m in pool.members]


def test_duplicate_endpoint_is_chosen_independently_of_slice_order() -> None:
    """The same address in two slices collapses to the same member whatever the order."""
    a = endpoint_slice("a", {"addresses": ["198.18.1.1"], "targetRef": {"name": "pod-n3"}})
    b = endpoint_slice("b", {"addresses": ["198.18.1.1"], "targetRef": {"name": "pod-n2"}})
    assert members([lb_service(), a, b]) == members([lb_service(), b, a])
    inc = IncrementalTranslator(OPTS)
    snapshot = Snapshot.of_objects([lb_service(), a, b])
    inc.update(snapshot)
    edited = endpoint_slice("a", {"addresses": ["198.18.1.1"], "targetRef": {"name": "pod-n3"}})
    snapshot = snapshot.replace(EndpointSlice.KIND, {edited.key: edited})
    assert inc.update(snapshot, changed=[(EndpointSlice.KIND, edited.key)]) == translate(
        snapshot, OPTS)


def test_serving_terminating_endpoints_take_traffic_only_when_none_is_ready() -> None:
    """Like kube-proxy: terminating-but-serving endpoints serve when no endpoint is ready."""
    terminating = {"addresses": ["198.18.1.2"],
                   "conditions": {"ready": False, "serving": True, "terminating": True}}
    gone = {"addresses": ["198.18.1.3"],
            "conditions": {"ready": False, "serving": False, "terminating": True}}
    ready = {"addresses": ["198.18.1.1"], "conditions": {"ready": True}}
    with_ready = members([lb_service(), endpoint_slice("s", ready, terminating, gone)])
    assert [s for _, s, _ in with_ready] == [MemberState.READY, MemberState.DRAINING,
                                              MemberState.DRAINING]
    without_ready = members([lb_service(), endpoint_slice("s", terminating, gone)])
    assert [(a, s) for a, s, _ in without_ready] == [("198.18.1.2", MemberState.READY),
                                                      ("198.18.1.3", MemberState.DRAINING)]


def test_serving_terminating_endpoints_beside_a_ready_one_are_marked_serving() -> None:
    """A rollout: the old pods (terminating, still serving) beside a new ready one are DRAINING
    *and* serving, the engine's fallback until it has checked the new one; a terminating pod
    that no longer serves is not."""
    terminating = {"addresses": ["198.18.1.2"],
                   "conditions": {"ready": False, "serving": True, "terminating": True}}
    gone = {"addresses": ["198.18.1.3"],
            "conditions": {"ready": False, "serving": False, "terminating": True}}
    ready = {"addresses": ["198.18.1.1"], "conditions": {"ready": True}}
    pool = translate(Snapshot.of_objects([lb_service(), endpoint_slice("s", ready, terminating,
                                                                       gone)]),
                     OPTS).ir.pools["pool/ns/web/80/tcp"]
    assert [(m.address, m.state, m.serving) for m in pool.members] == [
        ("198.18.1.1", MemberState.READY, False),
        ("198.18.1.2", MemberState.DRAINING, True),
        ("198.18.1.3", MemberState.DRAINING, False)]
