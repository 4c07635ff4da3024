"""Pods from Podway's image run as real containers in the lab: the image archive
(``./dev image``, an OCI layout as a tar) is unpacked once per lab with ``umoci``, and each
container of a pod whose image names it (``[registry/…/]podway:<tag of the archive>``) runs
under an OCI runtime inside the pod's network namespace, as a kubelet would run it (runc, or
crun where runc is missing: crun refuses hosts with cgroups in hybrid v1/v2 mode, such as this
project's CI machine):

- process: ``command`` replaces the image's entrypoint and ``args`` its cmd (Kubernetes rules);
  env = the image's, then ``envFrom``, then ``env`` (``value``, ``fieldRef`` for the pod's name,
  namespace, uid, node, IPs and service account, ``secretKeyRef``/``configMapKeyRef``);
- identity: ``runAsUser``/``runAsGroup`` (container over pod over the image's user),
  ``runAsNonRoot`` refused for uid 0, ``fsGroup`` and ``supplementalGroups`` as extra groups;
- privileges: the container runtimes' default capability set, minus ``drop``, plus ``add``; as on
  Kubernetes, a non-root process gets them only in its bounding set (no ambient capabilities);
  ``allowPrivilegeEscalation: false`` sets no_new_privs; ``privileged`` gives every capability;
- filesystem: the image's root, read-only with ``readOnlyRootFilesystem`` (else a private overlay
  on it); volumes: Secrets and ConfigMaps as files (``items``, ``defaultMode``), ``emptyDir``,
  ``hostPath``, ``downwardAPI`` and ``projected`` (those three sources), mounted with
  ``readOnly``/``subPath``; ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf`` of the pod.

Not done: resource limits (the runtime's default cgroup, no limits), image pulls, seccomp
profiles, service account tokens (the lab's API has no authentication yet).

Invariants: everything a container needs is under ``<state>/containers/<pod uid>/`` and
``<state>/images/``; a writable root is an overlay mounted there, unmounted when the pod goes
(and by ``lab down``, which unmounts whatever is mounted under the state folder).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podway.base.errors import EnvironmentProblem

Obj = dict[str, Any]

# The capabilities containerd and CRI-O give a container by default.
DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
                "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL",
                "AUDIT_WRITE")
ALL_CAPS = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
            "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
            "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
            "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
            "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
            "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
            "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE")
MASKED = ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
          "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"]
READONLY = ["/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
            "/proc/sysrq-trigger"]


def runtime(state: Path) -> list[str]:
    """The OCI runtime's command with its state folder: runc, else crun (without cgroups)."""
    if shutil.which("runc"):
        return ["runc", "--root", str(state / "runc")]
    if shutil.which("crun"):
        return ["crun", "--root", str(state / "crun"), "--cgroup-manager=disabled"]
    raise ContainerError("no OCI runtime: apt-get install runc")


class ContainerError(EnvironmentProblem):
    """A container cannot be made from its pod (CreateContainerConfigError on a cluster)."""


@dataclass(frozen=True, slots=True)
class Image:
    """An unpacked image: its name and tag, root filesystem and OCI image config."""
    name: str
    tag: str
    rootfs: Path
    config: Obj  # the image config's "config" member (Env, Entrypoint, Cmd, User, WorkingDir)

    def serves(self, ref: str) -> bool:
        """Whether a pod's ``image`` names this one: ``[registry/…/]name:tag``."""
        path, _, tag = ref.rpartition(":")
        if "/" in tag or not path:  # no tag (a registry port is not one)
            return False
        return tag == self.tag and path.rsplit("/", 1)[-1] == self.name


def archive_tag(archive: Path) -> str:
    """The tag (``org.opencontainers.image.ref.name``) of the single image in an OCI archive."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("./index.json") or tar.extractfile("index.json")
        if member is None:
            raise ContainerError(f"{archive}: not an OCI image layout (no index.json)")
        index = json.load(member)
    refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
            for m in index.get("manifests") or []]
    refs = [r for r in refs if r]
    if len(refs) != 1:
        raise ContainerError(f"{archive}: expected one tagged image, found {refs or 'none'}")
    return str(refs[0])


def unpack(archive: Path, into: Path, *, name: str = "podway") -> Image:
    """Extract the OCI archive and unpack its image with umoci (once: a second call reuses it)."""
    tag = archive_tag(archive)
    layout, bundle = into / "layout", into / "bundle"
    if not (bundle / "rootfs").is_dir():
        shutil.rmtree(into, ignore_errors=True)
        layout.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(layout, filter="tar")
        _run("umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle))
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]))
    config = json.loads(_blob(layout, manifest["config"]["digest"]))
    return Image(name=name, tag=tag, rootfs=bundle / "rootfs", config=config.get("config") or {})


def _blob(layout: Path, digest: str) -> str:
    algo, _, hexa = digest.partition(":")
    return (layout / "blobs" / algo / hexa).read_text()


def _run(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ContainerError(f"{argv[0]} is not installed (apt-get install {argv[0]})") from None
    if done.returncode != 0:
        raise ContainerError(f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


# ---- the pod's view: pure functions over the pod, its container and the image ----

def process_args(container: Obj, image: Obj) -> list[str]:
    """Kubernetes' rule: ``command`` replaces ENTRYPOINT (and drops CMD unless ``args``),
    ``args`` replaces CMD."""
    entry = list(image.get("Entrypoint") or [])
    cmd = list(image.get("Cmd") or [])
    if container.get("command"):
        entry, cmd = [str(a) for a in container["command"]], []
    if container.get("args") is not None:
        cmd = [str(a) for a in container["args"]]
    argv = entry + cmd
    if not argv:
        raise ContainerError(f"container {container.get('name')!r}: no command and the image "
                             "has no entrypoint")
    return argv


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


def environment(pod: Obj, container: Obj, image: Obj, objs: dict[tuple[str, str], Obj], *,
                pod_ip: str, host_ip: str) -> list[str]:
    """``NAME=value`` lines: the image's env, then envFrom, then env (later wins)."""
    env: dict[str, str] = {}
    for line in image.get("Env") or []:
        key, _, text = str(line).partition("=")
        env[key] = text
    env.setdefault("HOSTNAME", str((pod.get("metadata") or {}).get("name", "")))
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        for kind, field in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if field in source:
                ref = source[field]
                obj = objs.get((kind, str(ref.get("name"))))
                if obj is None:
                    if ref.get("optional"):
                        continue
                    raise ContainerError(f"{kind} {ref.get('name')!r} not found")
                for k, v in _data(kind, obj).items():
                    env[prefix + k] = v.decode(errors="replace")
    for item in container.get("env") or []:
        name = str(item["name"])
        if "valueFrom" not in item:
            env[name] = _expand(str(item.get("value", "")), env)
            continue
        source = item["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, str(source["fieldRef"].get("fieldPath")),
                                pod_ip=pod_ip, host_ip=host_ip)
        elif "secretKeyRef" in source:
            value = _key_of(objs, "secret", source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            value = _key_of(objs, "configmap", source["configMapKeyRef"])
        else:
            raise ContainerError(f"env {name!r}: valueFrom {sorted(source)} is not supported")
        if value is not None:
            env[name] = value
    return [f"{k}={v}" for k, v in env.items()]


def _expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` references to earlier variables, ``$$`` escapes (Kubernetes' rule)."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and (end := value.find(")", i)) != -1 \
                and value[i + 2:end] in env:
            out.append(env[value[i + 2:end]])
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _sc(pod: Obj, container: Obj, field: str) -> Any:
    """A securityContext field: the container's, else the pod's."""
    own = (container.get("securityContext") or {}).get(field)
    if own is not None:
        return own
    return ((pod.get("spec") or {}).get("securityContext") or {}).get(field)


def identity(pod: Obj, container: Obj, image: Obj, rootfs: Path) -> tuple[int, int, list[int]]:
    """uid, gid and additional gids of the container's process."""
    uid: int | None = _sc(pod, container, "runAsUser")
    gid: int | None = _sc(pod, container, "runAsGroup")
    user = str(image.get("User") or "0")
    name, _, group = user.partition(":")
    if uid is None:
        uid = _lookup(rootfs / "etc/passwd", name)
    if gid is None:
        gid = _lookup(rootfs / "etc/group", group) if group else _primary_gid(rootfs, uid)
    if _sc(pod, container, "runAsNonRoot") and uid == 0:
        raise ContainerError(f"container {container.get('name')!r} has runAsNonRoot and "
                             "would run as uid 0")
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    extra = [int(g) for g in psc.get("supplementalGroups") or []]
    if psc.get("fsGroup") is not None:
        extra.append(int(psc["fsGroup"]))
    return int(uid), int(gid), sorted(set(extra))


def _lookup(table: Path, name: str) -> int:
    if name.isdigit():
        return int(name)
    with contextlib.suppress(OSError):
        for line in table.read_text().splitlines():
            fields = line.split(":")
            if fields[0] == name and len(fields) > 2:
                return int(fields[2])
    raise ContainerError(f"user or group {name!r} is not in the image's {table.name}")


def _primary_gid(rootfs: Path, uid: int) -> int:
    with contextlib.suppress(OSError):
        for line in (rootfs / "etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) > 3 and fields[2] == str(uid):
                return int(fields[3])
    return 0


def capabilities(pod: Obj, container: Obj, uid: int) -> Obj:
    sc = container.get("securityContext") or {}
    caps = (sc.get("capabilities") or {})
    if sc.get("privileged"):
        have = list(ALL_CAPS)
    else:
        drop = {str(c).upper().removeprefix("CAP_") for c in caps.get("drop") or []}
        have = [] if "ALL" in drop else [c for c in DEFAULT_CAPS if c not in drop]
        for cap in caps.get("add") or []:
            name = str(cap).upper().removeprefix("CAP_")
            if name == "ALL":
                have = list(ALL_CAPS)
            elif name not in have:
                have.append(name)
    names = [f"CAP_{c}" for c in have]
    # A non-root process keeps its capabilities only in the bounding set, as under containerd.
    live = names if uid == 0 else []
    return {"bounding": names, "effective": live, "permitted": live, "inheritable": [],
            "ambient": []}


def runtime_spec(pod: Obj, container: Obj, image: Image, objs: dict[tuple[str, str], Obj], *,
                 root: Path, netns: str | None, mounts: list[Obj], pod_ip: str,
                 host_ip: str) -> Obj:
    """The OCI runtime config (config.json) of one container of ``pod``; it joins the network
    namespace ``netns`` (a new, empty one when None)."""
    uid, gid, extra = identity(pod, container, image.config, image.rootfs)
    sc = container.get("securityContext") or {}
    no_new_privs = sc.get("allowPrivilegeEscalation") is False
    name = str((pod.get("metadata") or {}).get("name", "pod"))
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False, "user": {"uid": uid, "gid": gid, "additionalGids": extra},
            "args": process_args(container, image.config),
            "env": environment(pod, container, image.config, objs, pod_ip=pod_ip,
                               host_ip=host_ip),
            "cwd": str(container.get("workingDir") or image.config.get("WorkingDir") or "/"),
            "capabilities": capabilities(pod, container, uid),
            "noNewPrivileges": no_new_privs},
        "root": {"path": str(root), "readonly": bool(sc.get("readOnlyRootFilesystem"))},
        "hostname": name[:63],
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            *mounts],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"},
                           {"type": "network", **({"path": f"/run/netns/{netns}"}
                                                  if netns else {})}],
            "maskedPaths": MASKED, "readonlyPaths": READONLY}}


# ---- the pod's files: volumes and /etc files under <state>/containers/<uid>/ ----

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
    """/etc/hosts, /etc/hostname and /etc/resolv.conf of the pod (read-only binds)."""
    name = str((pod.get("metadata") or {}).get("name", "pod"))
    folder.mkdir(parents=True, exist_ok=True)
    files = {"hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{pod_ip}\t{name}\n",
             "hostname": f"{name}\n",
             "resolv.conf": "# the lab has no cluster DNS\noptions ndots:5\n"}
    out = []
    for file, text in files.items():
        (folder / file).write_text(text)
        (folder / file).chmod(0o644)
        out.append({"destination": f"/etc/{file}", "type": "bind",
                    "source": str(folder / file), "options": ["rbind", "ro"]})
    return out


def mounted_under(root: Path) -> list[str]:
    """Mount points under ``root`` (deepest first), from /proc/self/mounts."""
    found = []
    prefix = str(root.resolve()).rstrip("/") + "/"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            point = line.split()[1].replace("\\040", " ")
            if point.startswith(prefix):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def overlay_root(image: Image, folder: Path) -> Path:
    """A private writable root over the image's (mounted; ``release`` unmounts it)."""
    upper, work, merged = folder / "upper", folder / "work", folder / "rootfs"
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    if str(merged.resolve()) not in mounted_under(folder):
        _run("mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={image.rootfs},upperdir={upper},workdir={work}", str(merged))
    return merged


def release(folder: Path) -> None:
    """Unmount what is mounted under ``folder`` and remove it."""
    for point in mounted_under(folder):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)
