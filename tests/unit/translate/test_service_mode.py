"""Per-Service backend mode: the ``podway.io/backend-mode`` annotation overrides the default."""

from __future__ import annotations

from podway.model import K8sObject, Node, Service, Snapshot
from podway.translate import BackendMode, IncrementalTranslator, TranslateOptions, translate
from podway.translate.annotations import BACKEND_MODE
from tests import builders
from tests.builders import endpoint_slice, node, pod, typed

OPTS = TranslateOptions(address="198.18.0.1")  # default mode: clusterip
POOL = "pool/ns/web/80/tcp"


def service(annotations: dict[str, str] | None = None, name: str = "web",
            port: int = 80) -> Service:
    return Service.model_validate(builders.service(
        name, port, None, type_="LoadBalancer", namespace="ns", annotations=annotations,
        node_port=30000 + port, port_name=None, protocol=None))


def objects() -> list[K8sObject]:
    """Pod p1 behind Service ns/web on node n1, with a NodePortLocal entry for its port."""
    return [typed(endpoint_slice("web", {"p1": "198.18.5.1"}, namespace="ns", port_name="")),
            typed(pod("p1", "198.18.5.1", npl=[(8080, "198.18.0.11", 61000)], namespace="ns")),
            typed(node("n1", "198.18.0.11"))]


def members(snapshot: Snapshot, opts: TranslateOptions = OPTS) -> list[str]:
    pool = translate(snapshot, opts).ir.pools[POOL]
    return [f"{m.address}:{m.port}" for m in pool.members]


def test_annotation_overrides_the_default_mode_per_service() -> None:
    """Each mode's members come from the annotation; without it the default applies."""
    base = objects()
    assert members(Snapshot.of_objects([service(), *base])) == ["198.18.5.1:8080"]
    npl = {BACKEND_MODE.name: "nodeportlocal", "nodeportlocal.antrea.io/enabled": "true"}
    assert members(Snapshot.of_objects([service(npl), *base])) == ["198.18.0.11:61000"]
    nodeport = {BACKEND_MODE.name: "nodeport"}
    assert members(Snapshot.of_objects([service(nodeport), *base])) == ["198.18.0.11:30080"]
    back = {BACKEND_MODE.name: "clusterip"}
    default_npl = TranslateOptions(address="198.18.0.1", mode=BackendMode.NODEPORTLOCAL)
    assert members(Snapshot.of_objects([service(back), *base]), default_npl) == [
        "198.18.5.1:8080"]


def test_invalid_annotation_is_a_warning_and_the_default_applies() -> None:
    """A value that names no mode is reported on the Service; members follow the default."""
    snapshot = Snapshot.of_objects([service({BACKEND_MODE.name: "fast"}), *objects()])
    result = translate(snapshot, OPTS)
    assert [p.reason for p in result.problems] == ["InvalidBackendMode"]
    assert members(snapshot) == ["198.18.5.1:8080"]


def test_incremental_mode_switch_re_resolves_the_pool() -> None:
    """Editing the annotation (a Service change) moves members in the incremental translator,
    and a Node change re-resolves nodeport pools only."""
    inc = IncrementalTranslator(OPTS)
    snapshot = Snapshot.of_objects([service(), service(name="other", port=81), *objects()])
    first = inc.update(snapshot)
    edited = service({BACKEND_MODE.name: "nodeport"})
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
    snapshot = Snapshot.of_objects([service({BACKEND_MODE.name: "nodeportlocal"}), *objects()])
    assert [p.reason for p in translate(snapshot, OPTS).problems] == ["NodePortLocalNotEnabled"]
    controller = TranslateOptions(address="198.18.0.1", npl_enabled_by_controller=True)
    assert translate(snapshot, controller).problems == ()
