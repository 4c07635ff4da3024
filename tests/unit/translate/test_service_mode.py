"""Per-Service backend mode: the ``podway.io/backend-mode`` annotation overrides the default."""

from __future__ import annotations

from typing import Any

from podway.model import EndpointSlice, K8sObject, Node, Pod, Service, Snapshot
from podway.translate import BackendMode, IncrementalTranslator, TranslateOptions, translate
from podway.translate.pools.backends import MODE_ANNOTATION

OPTS = TranslateOptions(address="198.18.0.1")  # default mode: clusterip
POOL = "pool/ns/web/80/tcp"


def service(annotations: dict[str, str] | None = None, name: str = "web",
            port: int = 80) -> Service:
    return Service.model_validate({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations or {}},
        "spec": {"type": "LoadBalancer", "ports": [{"port": port, "nodePort": 30000 + port}]}})


def objects() -> list[K8sObject]:
    raw: list[dict[str, Any]] = [
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "web-1", "namespace": "ns",
                      "labels": {"kubernetes.io/service-name": "web"}},
         "ports": [{"port": 8080}],
         "endpoints": [{"addresses": ["198.18.5.1"], "nodeName": "n1",
                        "targetRef": {"kind": "Pod", "name": "p1"}}]},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p1", "namespace": "ns", "annotations": {
             "nodeportlocal.antrea.io": '[{"podPort":8080,"nodeIP":"198.18.0.11",'
                                        '"nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]'}},
         "spec": {"nodeName": "n1"}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.11"}],
                    "conditions": [{"type": "Ready", "status": "True"}]}},
    ]
    kinds: dict[str, type[K8sObject]] = {"EndpointSlice": EndpointSlice, "Pod": Pod,
                                         "Node": Node}
    return [kinds[r["kind"]].model_validate(r) for r in raw]


def members(snapshot: Snapshot, opts: TranslateOptions = OPTS) -> list[str]:
    pool = translate(snapshot, opts).ir.pools[POOL]
    return [f"{m.address}:{m.port}" for m in pool.members]


def test_annotation_overrides_the_default_mode_per_service() -> None:
    """Each mode's members come from the annotation; without it the default applies."""
    base = objects()
    assert members(Snapshot.of_objects([service(), *base])) == ["198.18.5.1:8080"]
    npl = {MODE_ANNOTATION: "nodeportlocal", "nodeportlocal.antrea.io/enabled": "true"}
    assert members(Snapshot.of_objects([service(npl), *base])) == ["198.18.0.11:61000"]
    nodeport = {MODE_ANNOTATION: "nodeport"}
    assert members(Snapshot.of_objects([service(nodeport), *base])) == ["198.18.0.11:30080"]
    back = {MODE_ANNOTATION: "clusterip"}
    default_npl = TranslateOptions(address="198.18.0.1", mode=BackendMode.NODEPORTLOCAL)
    assert members(Snapshot.of_objects([service(back), *base]), default_npl) == [
        "198.18.5.1:8080"]


def test_invalid_annotation_is_a_warning_and_the_default_applies() -> None:
    """A value that names no mode is reported on the Service; members follow the default."""
    snapshot = Snapshot.of_objects([service({MODE_ANNOTATION: "fast"}), *objects()])
    result = translate(snapshot, OPTS)
    assert [p.reason for p in result.problems] == ["InvalidBackendMode"]
    assert members(snapshot) == ["198.18.5.1:8080"]


def test_incremental_mode_switch_re_resolves_the_pool() -> None:
    """Editing the annotation (a Service change) moves members in the incremental translator,
    and a Node change re-resolves nodeport pools only."""
    inc = IncrementalTranslator(OPTS)
    snapshot = Snapshot.of_objects([service(), service(name="other", port=81), *objects()])
    first = inc.update(snapshot)
    edited = service({MODE_ANNOTATION: "nodeport"})
    snapshot = snapshot.replace(Service.KIND, {edited.key: edited})
    result = inc.update(snapshot, changed=[(Service.KIND, edited.key)])
    assert result == translate(snapshot, OPTS)
    assert [m.port for m in result.ir.pools[POOL].members] == [30080]
    assert first.ir.pools["pool/ns/other/81/tcp"] is result.ir.pools["pool/ns/other/81/tcp"]
    node = Node.model_validate({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.12"}],
                   "conditions": [{"type": "Ready", "status": "True"}]}})
    snapshot = snapshot.replace(Node.KIND, {node.key: node})
    after = inc.update(snapshot, changed=[(Node.KIND, node.key)])
    assert after == translate(snapshot, OPTS)
    assert [m.address for m in after.ir.pools[POOL].members] == ["198.18.0.12"]
    assert after.ir.listeners is result.ir.listeners  # members only: no restructure
    assert after.ir.pools["pool/ns/other/81/tcp"] is result.ir.pools["pool/ns/other/81/tcp"]


def test_a_missing_npl_opt_in_is_a_warning_only_where_nobody_adds_it() -> None:
    """Standalone: a nodeportlocal Service without the opt-in annotation is warned about (its
    pool stays empty). Under the controller, which adds that annotation itself in its next step,
    the same Service gets no warning: a newcomer's first events show only what is wrong."""
    snapshot = Snapshot.of_objects([service({MODE_ANNOTATION: "nodeportlocal"}), *objects()])
    assert [p.reason for p in translate(snapshot, OPTS).problems] == ["NodePortLocalNotEnabled"]
    controller = TranslateOptions(address="198.18.0.1", npl_enabled_by_controller=True)
    assert translate(snapshot, controller).problems == ()
