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

What the cluster adds to every container — its ServiceAccount token, the ``kubernetes``
Service's variables, cluster names through the lab's DNS server — is ``podway.programs.lab.podenv``.

Not done: resource limits (the runtime's default cgroup, no limits), image pulls, seccomp
profiles.

Invariants: everything a container needs is under ``<state>/containers/<pod uid>/`` and
``<state>/images/``; a writable root is an overlay mounted there, unmounted when the pod goes
(and by ``lab down``, which unmounts whatever is mounted under the state folder).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podway.programs.lab.container_volumes import ContainerError, _data, _key_of, field_value

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

def process_args(container: Obj, image: Obj, env: dict[str, str] | None = None) -> list[str]:
    """Kubernetes' rule: ``command`` replaces ENTRYPOINT (and drops CMD unless ``args``),
    ``args`` replaces CMD; ``$(VAR)`` in ``command`` and ``args`` is the container's variable
    (``env``: what the pod spec and the cluster define, not the image), ``$$`` a ``$``."""
    entry = list(image.get("Entrypoint") or [])
    cmd = list(image.get("Cmd") or [])
    if container.get("command"):
        entry, cmd = [_expand(str(a), env or {}) for a in container["command"]], []
    if container.get("args") is not None:
        cmd = [_expand(str(a), env or {}) for a in container["args"]]
    argv = entry + cmd
    if not argv:
        raise ContainerError(f"container {container.get('name')!r}: no command and the image "
                             "has no entrypoint")
    return argv


def environment(pod: Obj, container: Obj, image: Obj, objs: dict[tuple[str, str], Obj], *,
                pod_ip: str, host_ip: str, cluster: dict[str, str] | None = None) -> list[str]:
    """``NAME=value`` lines: the image's env, the cluster's (``cluster``: the ``kubernetes``
    Service's variables), then envFrom, then env (later wins)."""
    env: dict[str, str] = {}
    for line in image.get("Env") or []:
        key, _, text = str(line).partition("=")
        env[key] = text
    env.update(cluster or {})
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


def held_caps(status: str | None = None) -> tuple[str, ...]:
    """The capabilities in this process's bounding set (``/proc/self/status``; ``status``: its
    text): all a runtime can give (``ALL_CAPS`` is in the kernel's bit order). A privileged
    container gets these, as under containerd: asking for one the host lacks (a sandbox without
    CAP_SYS_RESOURCE, say) makes the runtime refuse the whole container."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return ALL_CAPS
    line = next((ln for ln in status.splitlines() if ln.startswith("CapBnd:")), None)
    if line is None:
        return ALL_CAPS
    mask = int(line.split()[1], 16)
    return tuple(c for bit, c in enumerate(ALL_CAPS) if mask >> bit & 1)


def capabilities(pod: Obj, container: Obj, uid: int) -> Obj:
    sc = container.get("securityContext") or {}
    caps = (sc.get("capabilities") or {})
    if sc.get("privileged"):
        have = list(held_caps())
    else:
        drop = {str(c).upper().removeprefix("CAP_") for c in caps.get("drop") or []}
        have = [] if "ALL" in drop else [c for c in DEFAULT_CAPS if c not in drop]
        for cap in caps.get("add") or []:
            name = str(cap).upper().removeprefix("CAP_")
            if name == "ALL":
                have = list(held_caps())
            elif name not in have:
                have.append(name)
    names = [f"CAP_{c}" for c in have]
    # A non-root process keeps its capabilities only in the bounding set, as under containerd.
    live = names if uid == 0 else []
    return {"bounding": names, "effective": live, "permitted": live, "inheritable": [],
            "ambient": []}


def runtime_spec(pod: Obj, container: Obj, image: Image, objs: dict[tuple[str, str], Obj], *,
                 root: Path, netns: str | None, mounts: list[Obj], pod_ip: str,
                 host_ip: str, cluster_env: dict[str, str] | None = None) -> Obj:
    """The OCI runtime config (config.json) of one container of ``pod``; it joins the network
    namespace ``netns`` (a new, empty one when None)."""
    uid, gid, extra = identity(pod, container, image.config, image.rootfs)
    sc = container.get("securityContext") or {}
    no_new_privs = sc.get("allowPrivilegeEscalation") is False
    name = str((pod.get("metadata") or {}).get("name", "pod"))
    # A privileged container sees /proc and /sys unmasked and writable (host sysctls: the
    # chart's init containers), as under containerd and CRI-O.
    privileged = bool(sc.get("privileged"))
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False, "user": {"uid": uid, "gid": gid, "additionalGids": extra},
            "args": process_args(container, image.config, dict(
                line.split("=", 1) for line in environment(
                    pod, container, {}, objs, pod_ip=pod_ip, host_ip=host_ip,
                    cluster=cluster_env))),
            "env": environment(pod, container, image.config, objs, pod_ip=pod_ip,
                               host_ip=host_ip, cluster=cluster_env),
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
             "options": ["nosuid", "noexec", "nodev", "rw" if privileged else "ro"]},
            *mounts],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"},
                           {"type": "network", **({"path": f"/run/netns/{netns}"}
                                                  if netns else {})}],
            "maskedPaths": [] if privileged else MASKED,
            "readonlyPaths": [] if privileged else READONLY}}


# ---- the pod's files: volumes and /etc files under <state>/containers/<uid>/ ----

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
