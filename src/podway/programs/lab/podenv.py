"""What a cluster gives every container besides its own spec, for the lab's kubelet:

- its ServiceAccount's credentials at ``/var/run/secrets/kubernetes.io/serviceaccount``
  (``token``, ``ca.crt``, ``namespace``: what in-cluster clients read), unless
  ``automountServiceAccountToken: false`` (the pod's, else its ServiceAccount's) or the
  container mounts something there itself; the token is one the lab's API signed for that
  account, so RBAC applies to everything the pod does;
- the ``kubernetes`` Service's variables (``KUBERNETES_SERVICE_HOST``/``_PORT``…);
- cluster names through the lab's DNS server (``podway.programs.lab.dns``, at the API's
  address; ``/etc/resolv.conf`` names it, with the search list a kubelet writes):
  ``name.ns.svc.cluster.local`` is every Service's ClusterIP, or a headless Service's ready
  endpoints' addresses, answered from the API at the moment of the question. ``/etc/hosts``
  holds localhost and the pod, as a kubelet writes it. (Before, the names were in
  ``/etc/hosts``, rewritten as Services changed; Envoy's resolver re-reads that file about
  once a minute, so a name that appeared after it started took up to a minute to resolve.)

Pure but for ``write_files``, which makes the credential files under the pod's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from podway.programs.lab.plan import API_IP, CLUSTER_DOMAIN, KUBERNETES_IP

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


def service_addresses(services: list[Obj], slices: list[Obj]) -> list[tuple[Obj, list[str]]]:
    """Every Service with the addresses its name resolves to: its ClusterIP, or for a
    headless one each ready endpoint's address (none: the name does not resolve)."""
    out = []
    for svc in sorted(services, key=lambda s: (s["metadata"].get("namespace", ""),
                                               s["metadata"]["name"])):
        ip = (svc.get("spec") or {}).get("clusterIP")
        if ip:
            out.append((svc, _ready_addresses(svc, slices) if ip == "None" else [ip]))
    return out


def hosts(pod: Obj, pod_ip: str) -> str:
    """The pod's /etc/hosts as a kubelet writes it: localhost and the pod itself. Cluster
    names are the lab's DNS server's (``podway.programs.lab.dns``), as on a cluster."""
    name = str((pod.get("metadata") or {}).get("name", "pod"))
    return f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{pod_ip}\t{name}\n"


def resolv_conf(pod: Obj) -> str:
    namespace = str((pod.get("metadata") or {}).get("namespace", "default"))
    return (f"nameserver {API_IP}\n"  # the lab's cluster DNS (podway.programs.lab.dns)
            f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
            "options ndots:5\n")
