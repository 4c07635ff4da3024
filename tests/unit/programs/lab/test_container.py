"""The lab's container configs from pod specs (pure parts of podway.programs.lab.container):
Kubernetes' command/args rule, env resolution, identity, capabilities, volumes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from podway.programs.lab import container as ctr
from podway.programs.lab import container_volumes as vol

IMAGE = {"Entrypoint": ["podway"], "Cmd": ["--help"], "User": "10001:10001",
         "Env": ["PATH=/opt/podway/bin:/usr/bin", "PYTHONUNBUFFERED=1"]}
POD: dict[str, Any] = {"metadata": {"name": "p1", "namespace": "ns", "uid": "u-1",
                                    "labels": {"app": "x"}},
                       "spec": {"nodeName": "lab-node-2"}}


@pytest.mark.parametrize(("container", "argv"), [
    ({}, ["podway", "--help"]),
    ({"args": ["version"]}, ["podway", "version"]),
    ({"command": ["sh", "-c"]}, ["sh", "-c"]),  # command drops the image's CMD
    ({"command": ["sh", "-c"], "args": ["echo hi"]}, ["sh", "-c", "echo hi"]),
    ({"args": []}, ["podway"]),
])
def test_command_and_args_follow_kubernetes(container: dict[str, Any], argv: list[str]) -> None:
    assert ctr.process_args(container, IMAGE) == argv


def test_no_command_at_all_is_refused() -> None:
    with pytest.raises(vol.ContainerError, match="no command"):
        ctr.process_args({"name": "c"}, {})


def test_environment_image_then_env_from_then_env() -> None:
    objs = {("secret", "s"): {"data": {"k": base64.b64encode(b"secret!").decode()}},
            ("configmap", "cm"): {"data": {"A": "from-cm", "B": "b"}}}
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "0"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.labels['app']"}}},
                {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k",
                                                                "optional": True}}},
                {"name": "REF", "value": "$(POD)-on-$(NODE) $$(POD) $(UNKNOWN)"}]}
    env = dict(line.split("=", 1) for line in ctr.environment(
        POD, container, IMAGE, objs, pod_ip="198.18.2.5", host_ip="198.18.0.12"))
    assert env["PATH"] == "/opt/podway/bin:/usr/bin"
    assert env["PYTHONUNBUFFERED"] == "0"
    assert env["CM_A"] == "from-cm"
    assert (env["POD"], env["NODE"], env["IP"], env["APP"]) == (
        "p1", "lab-node-2", "198.18.2.5", "x")
    assert env["S"] == "secret!"
    assert "GONE" not in env
    assert env["REF"] == "p1-on-lab-node-2 $(POD) $(UNKNOWN)"


def test_a_missing_secret_key_is_a_config_error() -> None:
    container = {"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s",
                                                                      "key": "k"}}}]}
    with pytest.raises(vol.ContainerError, match="secret 's' not found"):
        ctr.environment(POD, container, IMAGE, {}, pod_ip="", host_ip="")


def test_identity_from_image_pod_and_container(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n"
                                         "podway:x:10001:10001::/var/lib/podway:/bin/false\n")
    (tmp_path / "etc/group").write_text("root:x:0:\npodway:x:10001:\n")
    assert ctr.identity(POD, {}, IMAGE, tmp_path) == (10001, 10001, [])
    assert ctr.identity(POD, {}, {"User": "podway"}, tmp_path) == (10001, 10001, [])
    pod = {**POD, "spec": {"securityContext": {"runAsUser": 20, "fsGroup": 30,
                                               "supplementalGroups": [40]}}}
    assert ctr.identity(pod, {"securityContext": {"runAsGroup": 21}}, IMAGE, tmp_path) == (
        20, 21, [30, 40])
    with pytest.raises(vol.ContainerError, match="runAsNonRoot"):
        ctr.identity(POD, {"securityContext": {"runAsNonRoot": True, "runAsUser": 0}},
                     IMAGE, tmp_path)
    with pytest.raises(vol.ContainerError, match="runAsNonRoot"):
        ctr.identity({**POD, "spec": {"securityContext": {"runAsNonRoot": True}}}, {},
                     {"User": "root"}, tmp_path)


def test_capabilities_as_containerd_gives_them() -> None:
    drop_add = {"securityContext": {"capabilities": {"drop": ["ALL"],
                                                     "add": ["NET_ADMIN", "CAP_NET_RAW"]}}}
    root = ctr.capabilities(POD, drop_add, 0)
    assert root["bounding"] == root["effective"] == ["CAP_NET_ADMIN", "CAP_NET_RAW"]
    # A non-root process keeps them only in its bounding set (no ambient capabilities).
    user = ctr.capabilities(POD, drop_add, 10001)
    assert user["bounding"] == ["CAP_NET_ADMIN", "CAP_NET_RAW"]
    assert user["effective"] == user["permitted"] == user["ambient"] == []
    default = ctr.capabilities(POD, {}, 0)["bounding"]
    assert "CAP_NET_BIND_SERVICE" in default
    assert "CAP_NET_ADMIN" not in default
    dropped = ctr.capabilities(POD, {"securityContext": {"capabilities": {"drop": ["KILL"]}}},
                               0)["bounding"]
    assert "CAP_KILL" not in dropped
    assert len(dropped) == len(default) - 1
    assert "CAP_SYS_ADMIN" in ctr.capabilities(
        POD, {"securityContext": {"privileged": True}}, 0)["effective"]


def test_privileged_gets_what_the_host_holds() -> None:
    """Only capabilities in the runtime's own bounding set: one it lacks (this sandbox has no
    CAP_SYS_RESOURCE, bit 24) made runc refuse every privileged container."""
    status = "Name:\tx\nCapBnd:\t000001fffeffffff\n"
    held = ctr.held_caps(status)
    assert "SYS_RESOURCE" not in held
    assert {"SYS_ADMIN", "NET_ADMIN", "CHECKPOINT_RESTORE"} <= set(held)
    assert len(held) == len(ctr.ALL_CAPS) - 1
    assert ctr.held_caps("CapBnd:\t000001ffffffffff\n") == ctr.ALL_CAPS
    mine = set(ctr.held_caps())
    given = ctr.capabilities(POD, {"securityContext": {"privileged": True}}, 0)["bounding"]
    assert {c.removeprefix("CAP_") for c in given} == mine


@pytest.mark.parametrize(("ref", "served"), [
    ("podway:0.1.0", True), ("ghcr.io/acme/podway:0.1.0", True),
    ("registry:5000/podway:0.1.0", True), ("podway:0.2.0", False), ("podway", False),
    ("registry:5000/podway", False), ("nginx:0.1.0", False), ("acme/notpodway:0.1.0", False),
])
def test_which_pod_images_the_archive_serves(ref: str, served: bool) -> None:
    assert ctr.Image(name="podway", tag="0.1.0", rootfs=Path(), config={}).serves(ref) is served


def test_volumes_secret_items_modes_and_mounts(tmp_path: Path) -> None:
    objs = {("secret", "tls"): {"data": {"tls.crt": base64.b64encode(b"CERT").decode(),
                                         "tls.key": base64.b64encode(b"KEY").decode()}},
            ("configmap", "cfg"): {"data": {"a.yaml": "a: 1"}}}
    pod = {**POD, "spec": {"volumes": [
        {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o400,
                                   "items": [{"key": "tls.key", "path": "k/key.pem"}]}},
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "who", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}
    vols = vol.pod_volumes(pod, objs, tmp_path, pod_ip="198.18.1.2", host_ip="198.18.0.11")
    key = vols["tls"][0] / "k/key.pem"
    assert key.read_bytes() == b"KEY"
    assert key.stat().st_mode & 0o777 == 0o400
    assert not (vols["tls"][0] / "tls.crt").exists()  # only the listed items
    assert (vols["cfg"][0] / "a.yaml").read_text() == "a: 1"
    assert (vols["who"][0] / "name").read_text() == "p1"
    assert vols["tls"][1]  # Secrets are read-only
    assert not vols["scratch"][1]  # an emptyDir is not
    assert vols["scratch"][0].stat().st_mode & 0o7777 == 0o777
    mounts = vol.volume_mounts({"volumeMounts": [
        {"name": "tls", "mountPath": "/etc/tls"},
        {"name": "scratch", "mountPath": "/tmp"},
        {"name": "cfg", "mountPath": "/etc/a.yaml", "subPath": "a.yaml"}]}, vols)
    assert [(m["destination"], m["options"][1]) for m in mounts] == [
        ("/etc/tls", "ro"), ("/tmp", "rw"), ("/etc/a.yaml", "ro")]
    assert mounts[2]["source"].endswith("/volumes/cfg/a.yaml")


@pytest.mark.parametrize("volume", [
    {"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../../x"}]}},
    {"name": "v", "secret": {"secretName": "missing"}},
    {"name": "v", "nfs": {"server": "x", "path": "/"}},
])
def test_bad_volumes_are_refused(tmp_path: Path, volume: dict[str, Any]) -> None:
    objs = {("secret", "s"): {"data": {"k": base64.b64encode(b"v").decode()}}}
    with pytest.raises(vol.ContainerError):
        vol.pod_volumes({**POD, "spec": {"volumes": [volume]}}, objs, tmp_path, pod_ip="",
                        host_ip="")


def test_a_sub_path_may_not_leave_its_volume(tmp_path: Path) -> None:
    with pytest.raises(vol.ContainerError, match="leaves"):
        vol.volume_mounts({"volumeMounts": [{"name": "v", "mountPath": "/x",
                                             "subPath": "../../etc"}]}, {"v": (tmp_path, False)})


def test_runtime_spec_joins_the_pods_namespace_read_only_root(tmp_path: Path) -> None:
    image = ctr.Image(name="podway", tag="0.1.0", rootfs=tmp_path, config=IMAGE)
    spec = ctr.runtime_spec(POD, {"securityContext": {"readOnlyRootFilesystem": True,
                                                      "allowPrivilegeEscalation": False}},
                            image, {}, root=tmp_path, netns="pwlab-x-n1-p0", mounts=[],
                            pod_ip="198.18.1.2", host_ip="198.18.0.11")
    assert spec["root"] == {"path": str(tmp_path), "readonly": True}
    assert spec["process"]["noNewPrivileges"] is True
    assert spec["process"]["user"] == {"uid": 10001, "gid": 10001, "additionalGids": []}
    assert {"type": "network", "path": "/run/netns/pwlab-x-n1-p0"} in spec["linux"]["namespaces"]
    assert spec["hostname"] == "p1"
    assert "/proc/sys" in spec["linux"]["readonlyPaths"]


def test_a_privileged_container_may_write_host_sysctls(tmp_path: Path) -> None:
    """As under containerd: no masked or read-only /proc paths, /sys writable (the chart's
    host set-up and ARP init containers write /proc/sys)."""
    image = ctr.Image(name="podway", tag="0.1.0", rootfs=tmp_path, config=IMAGE)
    spec = ctr.runtime_spec(POD, {"securityContext": {"privileged": True, "runAsUser": 0}},
                            image, {}, root=tmp_path, netns="pwlab-x-n1-p0", mounts=[],
                            pod_ip="198.18.1.2", host_ip="198.18.0.11")
    assert spec["linux"]["readonlyPaths"] == []
    assert spec["linux"]["maskedPaths"] == []
    sys_mount = next(m for m in spec["mounts"] if m["destination"] == "/sys")
    assert "rw" in sys_mount["options"]


def test_variables_in_command_and_args_are_the_containers() -> None:
    """``$(NODE_NAME)`` in args is the container's variable, as the kubelet expands it (the
    chart's engine sent the literal ``$(NODE_NAME)`` as its node id); an unknown one stays,
    ``$$`` is a ``$``; the image's own variables are not used."""
    container = {"name": "engine", "args": ["engine", "--node-id=$(NODE_NAME)", "$(NOPE)",
                                            "$$(NODE_NAME)", "$(PATH)"]}
    env = {"NODE_NAME": "lab-node-1"}
    assert ctr.process_args(container, IMAGE, env)[-4:] == [
        "--node-id=lab-node-1", "$(NOPE)", "$(NODE_NAME)", "$(PATH)"]
    spec = ctr.runtime_spec(
        {**POD, "spec": {**POD.get("spec", {}), "nodeName": "lab-node-1"}},
        {**container, "env": [{"name": "NODE_NAME", "valueFrom": {
            "fieldRef": {"fieldPath": "spec.nodeName"}}}]},
        ctr.Image(name="podway", tag="0.1.0", rootfs=Path("/nonexistent"),
                  config={"Env": ["PATH=/bin"], "User": "0"}),
        {}, root=Path("/r"), netns=None, mounts=[], pod_ip="198.18.1.2", host_ip="198.18.0.11")
    assert "--node-id=lab-node-1" in spec["process"]["args"]
