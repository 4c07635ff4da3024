"""Pure reconcile decisions: which ports a pod needs, and the plan against the port table."""

from __future__ import annotations

from typing import Any

from tests import builders

from podway.model.core import Node, Pod, Service
from podway.model.npl import NplEntry
from podway.programs.agent.ports import Entry
from podway.programs.agent.reconcile import (
    Target,
    annotation_entries,
    node_ip,
    plan,
    pod_active,
    pod_ipv4,
    service_enabled,
    targets,
)
from podway.programs.agent.types import PodKey

ENABLED = {"nodeportlocal.antrea.io/enabled": "true"}


def svc(name: str = "web", *, ns: str = "default", annotations: dict[str, str] | None = None,
        type_: str = "ClusterIP", selector: dict[str, str] | None = None,
        ports: list[dict[str, Any]] | None = None) -> Service:
    return Service.model_validate(builders.service(
        name, type_=type_, namespace=ns,
        annotations=ENABLED if annotations is None else annotations,
        selector={"app": "web"} if selector is None else selector,
        ports=ports if ports is not None else [builders.service_port(80, 8080, name=None,
                                                                     protocol=None)]))


def pod(*, ns: str = "default", ip: str | None = "198.18.1.2", phase: str = "Running",
        ports: list[dict[str, Any]] | None = None, node: str = "n1") -> Pod:
    return Pod.model_validate(builders.pod("p", ip or None, namespace=ns, phase=phase, node=node,
                                           container_ports=ports or []))


def test_opt_in_needs_exact_true_type_and_selector() -> None:
    """Only "true" exactly, ClusterIP/LoadBalancer, with a non-empty selector, opts in."""
    assert service_enabled(svc())
    assert service_enabled(svc(type_="LoadBalancer"))
    assert not service_enabled(svc(annotations={"nodeportlocal.antrea.io/enabled": "True"}))
    assert not service_enabled(svc(type_="NodePort"))
    assert not service_enabled(svc(selector={}))


def test_numeric_target_and_shared_mapping_across_services() -> None:
    """Two Services with the same targetPort share one target; other namespaces don't count."""
    found, notes = targets(pod(), [svc("a"), svc("b"), svc("c", ns="other")])
    assert found == {Target(pod_port=8080, protocol="tcp")}
    assert notes == []


def test_named_target_port_resolves_by_name_and_protocol() -> None:
    """A named targetPort is the container port with that name and the Service's protocol."""
    ports = [{"name": "dns", "containerPort": 5353, "protocol": "UDP"},
             {"name": "dns", "containerPort": 5300, "protocol": "TCP"}]
    service = svc(ports=[{"port": 53, "targetPort": "dns", "protocol": "UDP"},
                         {"port": 54, "targetPort": "nope", "protocol": "TCP"}])
    found, notes = targets(pod(ports=ports), [service])
    assert found == {Target(pod_port=5353, protocol="udp")}
    assert len(notes) == 1
    assert "'nope'" in notes[0]


def test_sctp_skipped_with_note_and_missing_target_port_defaults_to_port() -> None:
    """SCTP ports are skipped with a note; no targetPort means the Service port."""
    service = svc(ports=[{"port": 9000, "protocol": "SCTP"}, {"port": 7000}])
    found, notes = targets(pod(), [service])
    assert found == {Target(pod_port=7000, protocol="tcp")}
    assert "SCTP" in notes[0]


def test_host_port_is_reported_not_mapped() -> None:
    """A container port with hostPort becomes a host_port target (annotation only)."""
    found, _ = targets(pod(ports=[{"containerPort": 8080, "hostPort": 30080}]), [svc()])
    assert found == {Target(pod_port=8080, protocol="tcp", host_port=30080)}
    decided = plan(current=[], wanted=found, pod_ip="198.18.1.2")
    assert decided.allocate == []
    assert annotation_entries(entries=[], wanted=found, node_address="198.18.0.1",
                              pod_ip="198.18.1.2") == {
        NplEntry(pod_port=8080, node_ip="198.18.0.1", node_port=30080, protocol="tcp")}


def entry(port: int, node_port: int, ip: str = "198.18.1.2") -> Entry:
    return Entry(pod=PodKey("default/p"), pod_ip=ip, pod_port=port, protocol="tcp",
                 node_port=node_port)


def test_plan_allocates_keeps_releases_and_readdresses() -> None:
    """The plan keeps matching entries, re-points on IP change, frees unwanted, adds missing."""
    wanted = {Target(pod_port=80, protocol="tcp"), Target(pod_port=81, protocol="tcp")}
    decided = plan(current=[entry(80, 61000), entry(82, 61002)], wanted=wanted,
                   pod_ip="198.18.1.2")
    assert decided.keep == [entry(80, 61000)]
    assert decided.release == [entry(82, 61002)]
    assert decided.allocate == [Target(pod_port=81, protocol="tcp")]
    moved = plan(current=[entry(80, 61000)], wanted=wanted, pod_ip="198.18.1.9")
    assert moved.readdress == [entry(80, 61000)]


def test_plan_without_ip_releases_everything() -> None:
    """A pod without an IP needs nothing yet: existing entries are released."""
    decided = plan(current=[entry(80, 61000)], wanted={Target(pod_port=80, protocol="tcp")},
                   pod_ip=None)
    assert decided.release == [entry(80, 61000)]
    assert decided.allocate == []


def test_pod_activity_and_ip() -> None:
    """Succeeded/Failed pods and pods of other nodes are inactive; IPv4 is picked."""
    assert pod_active(pod(), node_name="n1")
    assert not pod_active(pod(phase="Succeeded"), node_name="n1")
    assert not pod_active(pod(phase="Failed"), node_name="n1")
    assert not pod_active(pod(), node_name="n2")
    assert pod_ipv4(pod(ip=None)) is None
    dual = Pod.model_validate({"metadata": {"name": "p"}, "status": {
        "podIP": "2001:db8::5", "podIPs": [{"ip": "2001:db8::5"}, {"ip": "198.18.1.5"}]}})
    assert pod_ipv4(dual) == "198.18.1.5"


def test_node_ip_prefers_internal_then_external_then_override() -> None:
    """nodeIP is the override, else InternalIP (as Antrea), else ExternalIP."""
    both = Node.model_validate({"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "198.18.0.1"},
        {"type": "ExternalIP", "address": "198.19.0.1"}]}})
    external = Node.model_validate({"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "ExternalIP", "address": "198.19.0.1"}]}})
    assert node_ip(both) == "198.18.0.1"
    assert node_ip(external) == "198.19.0.1"
    assert node_ip(both, override="198.18.9.9") == "198.18.9.9"
    assert node_ip(None) is None
