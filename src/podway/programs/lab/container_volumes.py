"""What a lab container sees of its pod: Secrets and ConfigMaps as files or values, emptyDir,
hostPath, downwardAPI and projected volumes mounted as the pod says, and the pod's ``/etc``
files (``podway.programs.lab.container`` runs the container)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from podway.base.errors import EnvironmentProblem

Obj = dict[str, Any]


def field_value(pod: Obj, path: str, *, pod_ip: str, host_ip: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
              "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip,
              "status.hostIPs": host_ip}
    if path in simple:
        return str(simple[path] or "")
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2:-2], ""))
    raise ContainerError(f"fieldRef {path!r} is not supported")


class ContainerError(EnvironmentProblem):
    """A container cannot be made from its pod (CreateContainerConfigError on a cluster)."""


def _key_of(objs: dict[tuple[str, str], Obj], kind: str, ref: Obj) -> str | None:
    obj = objs.get((kind, str(ref.get("name"))))
    if obj is None:
        if ref.get("optional"):
            return None
        raise ContainerError(f"{kind} {ref.get('name')!r} not found")
    data = _data(kind, obj)
    if ref.get("key") not in data:
        if ref.get("optional"):
            return None
        raise ContainerError(f"{kind} {ref.get('name')!r} has no key {ref.get('key')!r}")
    return data[str(ref["key"])].decode(errors="replace")


def _data(kind: str, obj: Obj) -> dict[str, bytes]:
    """A Secret's or ConfigMap's keys as bytes."""
    out: dict[str, bytes] = {}
    if kind == "secret":
        for k, v in (obj.get("data") or {}).items():
            out[k] = base64.b64decode(v)
        for k, v in (obj.get("stringData") or {}).items():
            out[k] = str(v).encode()
    else:
        for k, v in (obj.get("binaryData") or {}).items():
            out[k] = base64.b64decode(v)
        for k, v in (obj.get("data") or {}).items():
            out[k] = str(v).encode()
    return out


def _write_files(target: Path, files: dict[str, bytes], mode: int, fs_group: int | None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = target / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ContainerError(f"volume item path {rel!r} leaves its volume")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if fs_group is not None:
            os.chown(path, 0, fs_group)
            mode |= 0o040 if mode & 0o400 else 0
        path.chmod(mode)


def _items(kind: str, obj: Obj | None, source: Obj, name: str) -> dict[str, bytes]:
    if obj is None:
        if source.get("optional"):
            return {}
        ref = source.get("name", source.get("secretName"))
        raise ContainerError(f"volume {name!r}: {kind} {ref!r} not found")
    data = _data(kind, obj)
    if not source.get("items"):
        return data
    out = {}
    for item in source["items"]:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise ContainerError(f"volume {name!r}: {kind} has no key {item['key']!r}")
        out[str(item["path"])] = data[item["key"]]
    return out


def pod_volumes(pod: Obj, objs: dict[tuple[str, str], Obj], folder: Path, *, pod_ip: str,
                host_ip: str) -> dict[str, tuple[Path, bool]]:
    """Make every volume of ``pod`` under ``folder``: name → (host path, read-only)."""
    spec = pod.get("spec") or {}
    fs_group = ((spec.get("securityContext") or {}).get("fsGroup"))
    out: dict[str, tuple[Path, bool]] = {}
    for vol in spec.get("volumes") or []:
        name = str(vol["name"])
        target = folder / "volumes" / name
        if "hostPath" in vol:
            host = Path(str(vol["hostPath"]["path"]))
            kind = vol["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                host.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not host.exists():
                host.parent.mkdir(parents=True, exist_ok=True)
                host.touch()
            elif kind and not host.exists():
                raise ContainerError(f"volume {name!r}: hostPath {host} does not exist")
            out[name] = (host, False)
        elif "emptyDir" in vol:
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o777)  # as the kubelet makes an emptyDir
            out[name] = (target, False)
        elif "secret" in vol or "configMap" in vol:
            kind = "secret" if "secret" in vol else "configmap"
            source = vol["secret"] if kind == "secret" else vol["configMap"]
            ref = str(source.get("secretName") if kind == "secret" else source.get("name"))
            files = _items(kind, objs.get((kind, ref)), source, name)
            _write_files(target, files, int(source.get("defaultMode", 0o644)), fs_group)
            out[name] = (target, True)
        elif "downwardAPI" in vol or "projected" in vol:
            sources = vol["projected"].get("sources") or [] if "projected" in vol \
                else [{"downwardAPI": vol["downwardAPI"]}]
            files = {}
            for src in sources:
                if "secret" in src or "configMap" in src:
                    kind = "secret" if "secret" in src else "configmap"
                    part = src["secret"] if kind == "secret" else src["configMap"]
                    files.update(_items(kind, objs.get((kind, str(part.get("name")))), part, name))
                elif "downwardAPI" in src:
                    for item in src["downwardAPI"].get("items") or []:
                        if "fieldRef" not in item:
                            raise ContainerError(f"volume {name!r}: only fieldRef items")
                        files[str(item["path"])] = field_value(
                            pod, str(item["fieldRef"]["fieldPath"]), pod_ip=pod_ip,
                            host_ip=host_ip).encode()
                else:
                    raise ContainerError(f"volume {name!r}: projected source {sorted(src)} is "
                                         "not supported in the lab")
            mode = int((vol.get("projected") or vol.get("downwardAPI") or {})
                       .get("defaultMode", 0o644))
            _write_files(target, files, mode, fs_group)
            out[name] = (target, True)
        else:
            raise ContainerError(f"volume {name!r}: type {sorted(set(vol) - {'name'})} is not "
                                 "supported in the lab")
    return out


def volume_mounts(container: Obj, volumes: dict[str, tuple[Path, bool]]) -> list[Obj]:
    out = []
    for vm in container.get("volumeMounts") or []:
        name = str(vm["name"])
        if name not in volumes:
            raise ContainerError(f"volumeMount {name!r}: no such volume in the pod")
        host, read_only = volumes[name]
        if vm.get("subPath"):
            sub = Path(str(vm["subPath"]))
            if ".." in sub.parts or sub.is_absolute():
                raise ContainerError(f"volumeMount {name!r}: subPath {sub} leaves its volume")
            host = host / sub
        ro = read_only or bool(vm.get("readOnly"))
        out.append({"destination": str(vm["mountPath"]), "type": "bind", "source": str(host),
                    "options": ["rbind", "ro" if ro else "rw", "nosuid", "nodev"]})
    return out


def etc_files(pod: Obj, folder: Path, *, pod_ip: str) -> list[Obj]:
    """/etc/hosts, /etc/hostname and /etc/resolv.conf of the pod (read-only binds; cluster
    names through the lab's DNS server, which resolv.conf names: ``podenv``)."""
    from podway.programs.lab import podenv

    name = str((pod.get("metadata") or {}).get("name", "pod"))
    folder.mkdir(parents=True, exist_ok=True)
    files = {"hosts": podenv.hosts(pod, pod_ip), "hostname": f"{name}\n",
             "resolv.conf": podenv.resolv_conf(pod)}
    out = []
    for file, text in files.items():
        (folder / file).write_text(text)
        (folder / file).chmod(0o644)
        out.append({"destination": f"/etc/{file}", "type": "bind",
                    "source": str(folder / file), "options": ["rbind", "ro"]})
    return out
