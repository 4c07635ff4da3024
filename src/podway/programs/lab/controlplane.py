"""The lab's control plane: the API emulator on a loopback port (and on its address inside the
lab), HTTPS with the lab's certificate (``pki``), with the API server's own allocations
(clusterIPs, nodePorts) and its objects kept on disk.

Invariants: every write through the API or from the lab's own controllers passes the same
admission (a Service of type NodePort or LoadBalancer always has a nodePort per port, unique in
the lab; every non-headless Service has a clusterIP, kept across updates); after a write the
store is saved (coalesced, atomically by rename), so ``restart`` — a new emulator loaded from
``store.json`` on the same port — loses nothing that was acknowledged before the save; clients
resuming an older watch get ``410 Gone`` and re-list, as after an etcd compaction.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from podway.base.tasks import cancel_and_wait
from podway.kube.emulator import ApiError, KubeEmulator
from podway.kube.emulator.resources import ResourceType
from podway.programs.lab.pki import LabPki
from podway.programs.lab.plan import CLUSTER_IP_CIDR, KUBERNETES_IP, NODE_PORT_RANGE

log = logging.getLogger("podway.programs.lab.controlplane")
Obj = dict[str, Any]


def _ports_of(services: list[Obj], skip: tuple[str, str]) -> set[int]:
    used = set()
    for svc in services:
        meta = svc["metadata"]
        if (meta.get("namespace", ""), meta["name"]) == skip:
            continue
        for port in (svc.get("spec") or {}).get("ports") or []:
            if port.get("nodePort"):
                used.add(int(port["nodePort"]))
    return used


def admit_service(new: Obj, old: Obj | None, services: list[Obj]) -> None:
    """Allocate what the API server allocates for a Service (in place), or raise ``ApiError``."""
    meta, spec = new.setdefault("metadata", {}), new.setdefault("spec", {})
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    old_spec = (old or {}).get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    spec["type"] = kind
    if kind != "ExternalName" and not spec.get("clusterIP"):
        spec["clusterIP"] = old_spec.get("clusterIP") or _free_cluster_ip(services, key)
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        spec["clusterIPs"] = [spec["clusterIP"]]
    ports = spec.get("ports") or []
    if kind not in ("NodePort", "LoadBalancer"):
        for port in ports:
            port.pop("nodePort", None)
        return
    used = _ports_of(services, key)
    previous = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
                for p in old_spec.get("ports") or []}
    lo, hi = NODE_PORT_RANGE
    for port in ports:
        port.setdefault("protocol", "TCP")
        wanted = port.get("nodePort") or previous.get((port.get("port"), port["protocol"]))
        if wanted:
            wanted = int(wanted)
            if not lo <= wanted <= hi:
                raise ApiError(422, "Invalid", f"spec.ports[].nodePort: Invalid value: {wanted}:"
                                               f" provided port is not in the valid range. "
                                               f"The range of valid ports is {lo}-{hi}")
            if wanted in used:
                raise ApiError(422, "Invalid", f"spec.ports[].nodePort: Invalid value: {wanted}:"
                                               " provided port is already allocated")
        else:
            wanted = next((p for p in range(lo, hi + 1) if p not in used), 0)
            if not wanted:
                raise ApiError(422, "Invalid", "spec.ports[].nodePort: no free node port")
        port["nodePort"] = wanted
        used.add(wanted)


def _free_cluster_ip(services: list[Obj], skip: tuple[str, str]) -> str:
    taken = {(s.get("spec") or {}).get("clusterIP") for s in services
             if (s["metadata"].get("namespace", ""), s["metadata"]["name"]) != skip}
    taken.add(KUBERNETES_IP)  # the ``kubernetes`` Service's (the daemon creates it)
    for host in ipaddress.ip_network(CLUSTER_IP_CIDR).hosts():
        if str(host) not in taken:
            return str(host)
    raise ApiError(422, "Invalid", "spec.clusterIP: the service range is full")


#: The Gateway API CRDs the repository ships (deploy/crds/gateway-api/, one pinned release):
#: the lab installs the experimental channel, a superset of the standard one.
GATEWAY_API_CRDS = (Path(__file__).resolve().parents[4] / "deploy" / "crds" / "gateway-api"
                    / "v1.6.1" / "experimental")


def install_gateway_api_crds(emu: KubeEmulator, folder: Path = GATEWAY_API_CRDS) -> list[str]:
    """Every CustomResourceDefinition of ``folder`` put into ``emu`` (other documents, the
    ValidatingAdmissionPolicy guarding upgrades, are not served by the emulator); their names.
    Without the folder (Podway installed without its repository) the emulator's minimal
    schemaless CRDs of the kinds Podway reads stand in, with a warning."""
    if not folder.is_dir():
        log.warning("no Gateway API CRDs at %s: installing minimal ones", folder)
        emu.install_gateway_api()
        return []
    names = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                emu.put("customresourcedefinitions", doc)
                names.append(str(doc["metadata"]["name"]))
    return names


#: Podway's own CRDs (TrafficPolicy, VIPPool, GatewayClassConfig: the kinds table's
#: ``ships_crd`` rows), as the chart ships them.
PODWAY_CRDS = Path(__file__).resolve().parents[4] / "deploy" / "helm" / "podway" / "crds"


def install_podway_crds(emu: KubeEmulator, folder: Path = PODWAY_CRDS) -> list[str]:
    """Every CRD of ``folder`` the API does not hold yet put into ``emu`` (a lab stored before
    they shipped gets them too; one already there, perhaps by the chart, is left alone); the
    names put. Without the folder (Podway installed without its repository): none, with a
    warning."""
    if not folder.is_dir():
        log.warning("no Podway CRDs at %s: Podway's own kinds (TrafficPolicy, VIPPool, …) are "
                    "not served by the lab API", folder)
        return []
    names = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = str(doc["metadata"]["name"])
            if emu.get("customresourcedefinitions", "", name) is None:
                emu.put("customresourcedefinitions", doc)
                names.append(name)
    return names


class ControlPlane:
    """The emulator served on ``127.0.0.1:port``; ``store`` is its file on disk."""

    def __init__(self, *, port: int, store: Path,
                 changed: Callable[[], None] = lambda: None, pki: LabPki | None = None,
                 listen_in: Callable[[], socket.socket] | None = None) -> None:
        """``pki``: serve HTTPS with the lab's certificate and credentials (else plain HTTP,
        every client the administrator); ``listen_in``: makes one more listening socket to
        serve (the API's address inside the lab), anew at every (re)start."""
        self.port, self.path = port, store
        self._changed = changed
        self._pki, self._listen_in = pki, listen_in
        self._dirty = asyncio.Event()
        self._saver: asyncio.Task[None] | None = None
        # pods/{name}/log: the kubelet's (set by the daemon); None answers "no log here"
        self.pod_logs: Callable[[str, str, str | None], str | None] = lambda *_: None
        self.emu = self._new()

    def _new(self) -> KubeEmulator:
        # As a cluster: no create in a missing namespace; kubectl delete pod terminates it.
        pki = self._pki
        emu = KubeEmulator(require_namespaces=True, graceful_pod_deletion=True,
                           certificate=pki.serving() if pki is not None else None)
        if pki is not None:
            emu.set_credentials(admin_token=pki.admin_token,
                                token_key=pki.token_key_file.read_bytes())
        if self.path.exists():
            emu.load(json.loads(self.path.read_text()))
        else:  # a new lab: the Gateway API CRDs first, as a cluster admin would install them
            install_gateway_api_crds(emu)
        # Gateway API: ``lab compare`` routes its l7-haproxy row through a Gateway of the
        # HAProxy engine's group (an Ingress is always the default group's). A lab stored
        # before the CRDs shipped gets the emulator's minimal ones; shipped ones are kept.
        if emu.get("customresourcedefinitions", "",
                   "gateways.gateway.networking.k8s.io") is None:
            emu.install_gateway_api()
        install_podway_crds(emu)  # and Podway's own, as the chart would
        emu.set_admission(self._admit)
        emu.set_on_commit(self._committed)
        emu.set_pod_logs(self._pod_logs)
        return emu

    def _pod_logs(self, namespace: str, name: str, container: str | None) -> str | None:
        return self.pod_logs(namespace, name, container)  # late: the daemon sets it after

    def _admit(self, rtype: ResourceType, new: Obj, old: Obj | None) -> None:
        if rtype.group_resource == ("", "services"):
            admit_service(new, old, self.emu.objects("services"))

    def _committed(self) -> None:
        self._dirty.set()
        self._changed()

    async def start(self) -> None:
        await self.emu.start(port=self.port)
        if self._listen_in is not None:
            await self.emu.serve_socket(await asyncio.to_thread(self._listen_in))
        self._saver = asyncio.create_task(self._save_loop(), name="lab-store-saver")

    async def stop(self) -> None:
        if self._saver is not None:
            await cancel_and_wait(self._saver)
            self._saver = None
        await self.emu.stop()  # first: no write may land after the last save
        self.save()

    async def restart(self) -> None:
        """Stop serving, forget everything in memory, reload from disk, serve again."""
        await self.stop()
        self.emu = self._new()
        await self.start()
        log.info("control plane restarted from %s at version %s", self.path, self.emu.version)
        self._changed()

    async def _save_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.emu.dump()))
        os.replace(tmp, self.path)
