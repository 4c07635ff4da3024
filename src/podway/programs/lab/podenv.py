"""What a cluster gives every container besides its own spec, for the lab's kubelet:

- its ServiceAccount's credentials at ``/var/run/secrets/kubernetes.io/serviceaccount``
  (``token``, ``ca.crt``, ``namespace``: what in-cluster clients read), unless
  ``automountServiceAccountToken: false`` (the pod's, else its ServiceAccount's) or the
  container mounts something there itself; the token is one the lab's API signed for that
  account, so RBAC applies to everything the pod does;
- the ``kubernetes`` Service's variables (``KUBERNETES_SERVICE_HOST``/``_PORT``…);
- cluster names without a DNS server: ``/etc/hosts`` lists every Service's ClusterIP as
  ``name.ns.svc.cluster.local``, ``name.ns.svc``, ``name.ns`` and, in the pod's own namespace,
  ``name`` (what a resolver's search list would find); the kubelet rewrites the file in place
  when Services or endpoints change, so names made after the pod started resolve too. A
  headless Service's name lists its ready endpoints' addresses (what DNS answers for it);
  ExternalName Services are not listed.

Pure but for ``write_files``, which makes the credential files under the pod's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from podway.programs.lab.plan import CLUSTER_DOMAIN, KUBERNETES_IP

Obj = dict[str, Any]
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def service_account(pod: Obj) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def automount(pod: Obj, account: Obj | None) -> bool:
    """Whether the pod gets its ServiceAccount's token (pod's setting over the account's)."""
    own = (pod.get("spec") or {}).get("automountServiceAccountToken")
    if own is not None:
        return bool(own)
    return bool((account or {}).get("automountServiceAccountToken", True))


def token_mount(container: Obj, folder: Path) -> list[Obj]:
    """The read-only bind of the credentials folder, unless the container mounts that path."""
    if any(str(m.get("mountPath", "")).rstrip("/") == TOKEN_DIR
           for m in container.get("volumeMounts") or []):
        return []
    return [{"destination": TOKEN_DIR, "type": "bind", "source": str(folder),
             "options": ["rbind", "ro", "nosuid", "nodev"]}]


def write_files(folder: Path, *, token: str, ca: bytes, namespace: str, gid: int | None) -> None:
    """``token``, ``ca.crt`` and ``namespace`` in ``folder``, readable by the pod's fsGroup
    (when it has one) or by everyone (``ca.crt``, ``namespace``) and the token 0644 as the
    kubelet's projected volume makes it without an fsGroup."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("token", token.encode()), ("ca.crt", ca),
                       ("namespace", namespace.encode())):
        path = folder / name
        path.write_bytes(data)
        if gid is not None:
            os.chown(path, 0, gid)
            path.chmod(0o640)
        else:
            path.chmod(0o644)


def service_env() -> dict[str, str]:
    """The ``kubernetes`` Service's environment variables, as the kubelet sets them."""
    return {"KUBERNETES_SERVICE_HOST": KUBERNETES_IP, "KUBERNETES_SERVICE_PORT": "443",
            "KUBERNETES_SERVICE_PORT_HTTPS": "443",
            "KUBERNETES_PORT": f"tcp://{KUBERNETES_IP}:443",
            "KUBERNETES_PORT_443_TCP": f"tcp://{KUBERNETES_IP}:443",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp", "KUBERNETES_PORT_443_TCP_PORT": "443",
            "KUBERNETES_PORT_443_TCP_ADDR": KUBERNETES_IP}


def _ready_addresses(service: Obj, slices: list[Obj]) -> list[str]:
    """A headless Service's answer: the addresses of its ready endpoints."""
    ns, name = service["metadata"].get("namespace", "default"), service["metadata"]["name"]
    return sorted({a for sl in slices
                   if sl["metadata"].get("namespace", "default") == ns
                   and (sl["metadata"].get("labels") or {}).get(
                       "kubernetes.io/service-name") == name
                   for ep in sl.get("endpoints") or []
                   if (ep.get("conditions") or {}).get("ready", True)
                   for a in ep.get("addresses") or []})


def hosts(pod: Obj, pod_ip: str, services: list[Obj], slices: list[Obj] | None = None) -> str:
    """The pod's /etc/hosts: itself, then every Service under its cluster names: its
    ClusterIP, or for a headless one each ready endpoint's address (a line each, in order)."""
    meta = pod.get("metadata") or {}
    name, own_ns = str(meta.get("name", "pod")), str(meta.get("namespace", "default"))
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost", f"{pod_ip}\t{name}"]
    for svc in sorted(services, key=lambda s: (s["metadata"].get("namespace", ""),
                                               s["metadata"]["name"])):
        ip = (svc.get("spec") or {}).get("clusterIP")
        if not ip:
            continue
        addresses = _ready_addresses(svc, slices or []) if ip == "None" else [ip]
        svc_name, ns = svc["metadata"]["name"], svc["metadata"].get("namespace", "default")
        names = [f"{svc_name}.{ns}.svc.{CLUSTER_DOMAIN}", f"{svc_name}.{ns}.svc",
                 f"{svc_name}.{ns}", *([svc_name] if ns == own_ns else [])]
        lines.extend(f"{address}\t{' '.join(names)}" for address in addresses)
    return "\n".join(lines) + "\n"


def resolv_conf(pod: Obj) -> str:
    namespace = str((pod.get("metadata") or {}).get("namespace", "default"))
    return (f"# the lab has no DNS server: cluster names are in /etc/hosts\n"
            f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
            "options ndots:5\n")
