"""The chart's L2 mode (``reachability.mode: l2``, templates/l2.yaml), rendered with Helm itself:
a DaemonSet per engine group on that group's nodes, host networking, NET_ADMIN and NET_RAW only,
its own service account; and that account's RBAC, loaded into the API emulator, lets the real
`podway vip l2` cluster code (the group from Nodes, the VIPs from Services, the engine pod's
health, MetalLB's pools and L2Advertisements) list and watch everything it reads — with one of
its Roles missing, the speaker refuses to start instead of taking every VIP alone."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.base.errors import EnvironmentProblem
from podway.kube.emulator import KubeEmulator
from podway.programs.vip.l2 import L2Settings, L2Speaker
from podway.programs.vip.l2_cluster import ClusterOptions, run_in_cluster
from tests.deploy.helm import NAMESPACE, render
from tests.deploy.test_manifests import by_kind, validate
from tests.waiting import eventually

MLB_NS = "lb"
POOLS = [{"name": "default", "addresses": ["198.18.100.0/28"]},
         {"name": "db", "addresses": ["198.18.101.0/28", "198.18.102.1"], "engineGroup": "db"}]
GROUPS = [{"name": "edge", "engine": "envoy", "replicas": 2, "tlsSecret": "t",
           "concurrency": 2, "nodeSelector": {"podway.io/edge": "true", "rack": "a"}},
          {"name": "db", "engine": "kernel", "replicas": 2, "tlsSecret": "t", "concurrency": 2,
           "onlyItsObjects": True, "nodeSelector": {"podway.io/db": "true"}}]


def l2_values(**l2: Any) -> dict[str, Any]:
    return {"vipPools": POOLS, "engineGroups": GROUPS,
            "reachability": {"mode": "l2", "l2": l2}}


def container(objects: list[Any], group: str) -> dict[str, Any]:
    spec = by_kind(objects, "DaemonSet", f"podway-l2-{group}")["spec"]["template"]["spec"]
    return dict(spec["containers"][0])


async def test_chart_l2_mode_runs_a_speaker_daemonset_per_engine_group(helm: Any) -> None:
    """One DaemonSet per engine group on that group's nodes: host networking, root with
    NET_ADMIN and NET_RAW only, no privilege escalation, read-only root; the group's Nodes by
    its nodeSelector, the VIPs from Services in the group's pools (the group-less pool goes to
    the first group serving every object), health from the group's engine pods; the key Secret
    generated; the engines get ip_nonlocal_bind and no AnyIP route (that is BGP's)."""
    lint, objects = await render(helm, l2_values(quorum=True))
    assert not [m for m in lint.get("messages", []) if "WARNING" in str(m).upper()], lint
    validate(objects)
    for group, selector, pools, port in (
            ("edge", "podway.io/edge=true,rack=a", ["198.18.100.0/28"], 7947),
            ("db", "podway.io/db=true", ["198.18.101.0/28", "198.18.102.1"], 7948)):
        daemonset = by_kind(objects, "DaemonSet", f"podway-l2-{group}")
        spec = daemonset["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        assert spec["serviceAccountName"] == "podway-l2"
        assert spec["nodeSelector"] == next(g["nodeSelector"] for g in GROUPS
                                            if g["name"] == group)
        speaker = container(objects, group)
        assert speaker["securityContext"]["capabilities"] == {"drop": ["ALL"],
                                                              "add": ["NET_ADMIN", "NET_RAW"]}
        assert speaker["securityContext"]["allowPrivilegeEscalation"] is False
        assert speaker["securityContext"]["readOnlyRootFilesystem"] is True
        assert "privileged" not in speaker["securityContext"]
        args = speaker["args"]
        assert args[:2] == ["vip", "l2"]
        assert f"--peers-from-nodes={selector}" in args
        assert [a.removeprefix("--pool=") for a in args if a.startswith("--pool=")] == pools
        assert "--vips-from-services" in args
        assert "--quorum" in args
        assert (f"--engine-pods=app.kubernetes.io/component=engine,podway.io/engine-group="
                f"{group}") in args
        assert f"--engine-namespace={NAMESPACE}" in args
        assert f"--listen=$(HOST_IP):{port}" in args  # two groups' speakers may share a node
        init = spec["initContainers"][0]
        assert init["name"] == "arp-isolation"
        assert "arp_ignore=1" in init["args"][0]
    key = by_kind(objects, "Secret", "podway-l2-key")
    assert len(key["data"]["key"]) >= 24  # base64 of ≥ 16 bytes
    engine = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    setup = next(c for c in engine["initContainers"] if c["name"] == "host-setup")
    assert "ip_nonlocal_bind=1" in setup["args"][0]
    assert "ip route" not in setup["args"][0]
    # It elects by hashing: no Lease; it writes nothing.
    granted = [(r, v) for kind in ("ClusterRole", "Role")
               for o in objects if o["kind"] == kind and o["metadata"]["name"] == "podway-l2"
               for rule in o["rules"] for r in rule["resources"] for v in rule["verbs"]]
    assert {v for _, v in granted} == {"get", "list", "watch"}
    assert {r for r, _ in granted} == {"nodes", "services", "pods"}


async def test_chart_l2_from_metallb_and_without_arp_isolation(helm: Any) -> None:
    """fromMetalLB: the speaker takes placement from MetalLB's objects (no --pool), with a Role
    in MetalLB's namespace that reads only its pools and L2Advertisements and writes Events
    there (on the ones it cannot use); arpIsolation false:
    no privileged init container, and the speaker leaves the sysctls alone."""
    _, objects = await render(helm, l2_values(
        arpIsolation=False, fromMetalLB={"enabled": True, "namespace": MLB_NS}))
    validate(objects)
    args = container(objects, "edge")["args"]
    assert "--from-metallb" in args
    assert f"--metallb-namespace={MLB_NS}" in args
    assert "--no-arp-isolation" in args
    assert not [a for a in args if a.startswith("--pool")]
    spec = by_kind(objects, "DaemonSet", "podway-l2-edge")["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    role = by_kind(objects, "Role", "podway-l2-metallb")
    assert role["metadata"]["namespace"] == MLB_NS
    assert role["rules"] == [{"apiGroups": ["metallb.io"],
                              "resources": ["ipaddresspools", "l2advertisements"],
                              "verbs": ["get", "list", "watch"]},
                             {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


async def test_chart_without_l2_renders_no_l2_object(helm: Any) -> None:
    _, objects = await render(helm, {})
    assert not [o for o in objects if "l2" in o["metadata"]["name"]]


# --- the RBAC, exercised by the speaker's own API calls -------------------------------------
def crd(kind: str, plural: str) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.metallb.io"},
            "spec": {"group": "metallb.io", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": f"{kind}List"},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def cluster(emu: KubeEmulator, rbac: list[Any]) -> None:
    """Two edge Nodes, a LoadBalancer Service holding a VIP, this node's Ready engine pod,
    MetalLB's pool and advertisement, and the chart's RBAC objects."""
    for name, address in (("n1", "198.18.0.1"), ("n2", "198.18.0.2")):
        emu.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"podway.io/edge": "true", "rack": "a"}},
            "status": {"addresses": [{"type": "InternalIP", "address": address}]}})
    emu.put("services", {"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "web", "namespace": "default"},
                         "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                         "status": {"loadBalancer": {"ingress": [{"ip": "198.18.100.3"}]}}})
    emu.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "engine-1", "namespace": NAMESPACE,
        "labels": {"app.kubernetes.io/component": "engine", "podway.io/engine-group": "edge"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "engine", "image": "x"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    for kind, plural in (("IPAddressPool", "ipaddresspools"),
                         ("L2Advertisement", "l2advertisements")):
        emu.put("customresourcedefinitions", crd(kind, plural))
    emu.put("ipaddresspools", {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                               "metadata": {"name": "lan", "namespace": MLB_NS},
                               "spec": {"addresses": ["198.18.100.0/28"]}}, group="metallb.io")
    emu.put("l2advertisements", {"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
                                 "metadata": {"name": "lan", "namespace": MLB_NS},
                                 "spec": {"interfaces": ["e1"]}}, group="metallb.io")
    emu.put("l2advertisements", {"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
                                 "metadata": {"name": "broken", "namespace": MLB_NS},
                                 "spec": {"nodeSelectors": "rack=a"}}, group="metallb.io")
    for obj in rbac:
        emu.put(f"{obj['kind'].lower()}s", obj, group="rbac.authorization.k8s.io")


async def speaker_reads(rbac: list[Any], folder: Path) -> tuple[L2Speaker, list[Any]]:
    """Run the speaker's cluster part as the chart's service account against ``cluster``;
    return the speaker once it would start (its run is a stand-in) and the Events in MetalLB's
    namespace, or raise."""
    settings = L2Settings(node="n1", interface="e0", listen=("198.18.0.1", 7947), peers={},
                          vips=(), key=b"k" * 16, placement={}, arp_isolation=False)
    speaker = L2Speaker(settings)
    started = asyncio.Event()

    async def stand_in() -> None:
        started.set()
        await asyncio.Event().wait()

    speaker.run = stand_in  # type: ignore[method-assign]
    opts = ClusterOptions(node="n1", port=7947, ipv6=False,
                          peer_selector="podway.io/edge=true,rack=a", vips_from_services=True,
                          pools=("198.18.100.0/28",), engine_namespace=NAMESPACE,
                          engine_selector="app.kubernetes.io/component=engine,"
                                          "podway.io/engine-group=edge")
    async with KubeEmulator() as emu:
        cluster(emu, rbac)
        token = emu.issue_token(NAMESPACE, "podway-l2", node="n1")
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": emu.url}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        task = asyncio.create_task(run_in_cluster(speaker, opts, metallb_namespace=MLB_NS,
                                                  kubeconfig=str(kubeconfig)))
        try:
            done = asyncio.create_task(started.wait())
            await asyncio.wait({task, done}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                try:
                    task.result()  # raises what stopped it
                except BaseExceptionGroup as group:
                    raise leaf(group) from None
            assert started.is_set(), "the speaker never started"
            await eventually(lambda: speaker.placement == {"198.18.100.3": ("e1",)},
                             within=15)
            await eventually(lambda: len(events(emu)) > 0, within=10)
            await asyncio.sleep(0.5)  # one per problem, not more
            written = events(emu)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return speaker, written


def events(emu: KubeEmulator) -> list[Any]:
    return [e for e in emu.objects("events") if e["metadata"]["namespace"] == MLB_NS]


def leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def rbac_of(objects: list[Any]) -> list[Any]:
    return [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role",
                                                "RoleBinding")
            and o["metadata"]["name"].startswith("podway-l2")]


async def test_the_l2_service_account_may_make_every_call_the_speaker_makes(
        helm: Any, tmp_path: Path) -> None:
    """The chart's RBAC for the speaker, in an API server that enforces it: the speaker, as
    that service account, learns its peer (n2 at its InternalIP), the Service's VIP, that its
    engine is Ready, and MetalLB's placement of the VIP on e1; the L2Advertisement it cannot
    use gets one Warning Event."""
    _, objects = await render(helm, l2_values(fromMetalLB={"enabled": True,
                                                          "namespace": MLB_NS}))
    speaker, written = await speaker_reads(rbac_of(objects), tmp_path)
    assert [(e["involvedObject"]["name"], e["type"], e["reason"]) for e in written] == [
        ("broken", "Warning", "NotCarried")]
    assert "selectors must be a list" in written[0]["message"]
    assert dict(speaker.peers) == {"n2": ("198.18.0.2", 7947)}
    assert speaker.vips == ("198.18.100.3",)
    assert speaker.healthy is not None
    assert await speaker.healthy() is True


async def test_without_a_role_the_speaker_refuses_to_start(helm: Any, tmp_path: Path) -> None:
    """The check can fail: without the Role that reads the engine pods the API answers 403, and
    the speaker stops with that (it never claims a VIP it cannot check)."""
    _, objects = await render(helm, l2_values(fromMetalLB={"enabled": True,
                                                          "namespace": MLB_NS}))
    rbac = [o for o in rbac_of(objects) if not (o["kind"] == "Role"
                                                and o["metadata"]["name"] == "podway-l2")]
    with pytest.raises(EnvironmentProblem, match="l2-engine-pods"):
        await speaker_reads(rbac, tmp_path)
