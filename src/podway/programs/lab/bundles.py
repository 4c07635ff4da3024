"""The OCI bundles of one pod's containers (``config.json`` and a root each), made from the pod,
the lab's image and what the cluster adds (``podenv``): its volumes, its ``/etc`` files with
cluster names, its ServiceAccount's credentials and the ``kubernetes`` Service's variables.
Blocking (files and overlay mounts): the kubelet runs it in a thread."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podway.programs.lab import container as ctr
from podway.programs.lab import container_volumes as vol
from podway.programs.lab import podenv

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodPlace:
    """Where a pod runs: its network namespace and addresses, its folder of files."""
    netns: str
    pod_ip: str
    host_ip: str
    folder: Path


def make(pod: Obj, image: ctr.Image, objs: dict[tuple[str, str], Obj], place: PodPlace, *,
         token: str | None, ca: bytes, specs: list[Obj] | None = None
         ) -> list[tuple[str, Path]]:
    """(container name, bundle folder) for every container of ``pod`` (``specs``: for these
    instead, e.g. one of its init containers); ``token``: the pod's ServiceAccount token
    (None: not mounted). Raises ``ContainerError``/``OSError``."""
    folder = place.folder
    volumes = vol.pod_volumes(pod, objs, folder, pod_ip=place.pod_ip, host_ip=place.host_ip)
    etc = vol.etc_files(pod, folder / "etc", pod_ip=place.pod_ip)
    account = folder / "serviceaccount"
    if token is not None:
        fs_group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        podenv.write_files(account, token=token, ca=ca,
                           namespace=str(pod["metadata"].get("namespace", "default")),
                           gid=None if fs_group is None else int(fs_group))
    bundles = []
    if specs is None:
        specs = list((pod.get("spec") or {}).get("containers") or [])
    for index, spec in enumerate(specs):
        name = str(spec.get("name", f"c{index}"))
        bundle = folder / "bundles" / name
        bundle.mkdir(parents=True, exist_ok=True)
        writable = not (spec.get("securityContext") or {}).get("readOnlyRootFilesystem")
        root = ctr.overlay_root(image, bundle) if writable else image.rootfs
        mounts = [*etc, *vol.volume_mounts(spec, volumes),
                  *(podenv.token_mount(spec, account) if token is not None else [])]
        config = ctr.runtime_spec(pod, spec, image, objs, root=root, netns=place.netns,
                                  mounts=mounts, pod_ip=place.pod_ip, host_ip=place.host_ip,
                                  cluster_env=podenv.service_env())
        (bundle / "config.json").write_text(json.dumps(config, indent=1))
        bundles.append((name, bundle))
    return bundles
