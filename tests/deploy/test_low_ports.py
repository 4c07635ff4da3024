"""The chart's engine binds ports below 1024 as uid 10001 (issue 29's open defect).

Each proxy of the image (Envoy from the wheel, HAProxy) is copied and given the file capability
the image build gives it (deploy/image/net-bind-cap.py), then started as the chart's engine
container runs: uid/gid 10001, the capability sets the lab's runtime model derives from the
chart's securityContext (``podway.programs.lab.container.capabilities``: a non-root process holds
its added capabilities in the bounding set only), and no_new_privs exactly when the chart sets
``allowPrivilegeEscalation: false`` — inside a network namespace made here, binding port 80.
The same run with no_new_privs (the chart's earlier setting) or without the file capability
is refused, which is why both parts are needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.envoy.engine.process import find_envoy
from podway.programs.lab.container import capabilities
from tests.deploy.test_manifests import PLAIN, ROOT, by_kind

pytestmark = pytest.mark.netns
PYTHON = "/usr/bin/python3"
# A stand-in for the engine's supervisor: it holds no capability (checked), then execs the proxy.
SUPERVISOR = """
import os, sys
held = [line for line in open("/proc/self/status") if line.startswith(("CapPrm", "CapEff"))]
assert all(int(line.split()[1], 16) == 0 for line in held), held
os.execv(sys.argv[1], sys.argv[1:])
"""
NET_BIND_CAP = ROOT / "deploy" / "image" / "net-bind-cap.py"
ENVOY_CONFIG = """
static_resources:
  listeners:
  - name: low
    address: {socket_address: {address: 127.0.0.1, port_value: 80}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.direct_response
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config
          response: {inline_string: "low port\\n"}
"""
HAPROXY_CONFIG = """
global
  pidfile /dev/null
defaults
  mode tcp
  timeout connect 1s
  timeout client 1s
  timeout server 1s
frontend low
  bind 127.0.0.1:80
"""


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, setpriv to uid 10001)"
    if shutil.which("setpriv") is None or shutil.which("ip") is None:
        return "needs setpriv (util-linux) and ip (iproute2)"
    return None


@pytest.fixture
def netns() -> Iterator[str]:
    why = _unavailable()
    if why:
        pytest.skip(why)
    name = f"pw-lowport-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder uid 10001 can read (pytest's tmp_path is root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="podway-lowport-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def engine_container() -> tuple[dict[str, Any], dict[str, Any]]:
    objects = [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]
    pod = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]
    engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    return pod, engine


def setpriv(pod: dict[str, Any], container: dict[str, Any], uid: int) -> list[str]:
    """setpriv arguments giving a process what the runtime gives this container."""
    caps = capabilities(pod, container, uid)

    def listed(names: list[str]) -> str:
        return ",".join(["-all", *(f"+{n.removeprefix('CAP_').lower()}" for n in names)])
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            f"--inh-caps={listed(caps['inheritable'])}",
            f"--ambient-caps={listed(caps['ambient'])}",
            f"--bounding-set={listed(caps['bounding'])}"]
    if (container.get("securityContext") or {}).get("allowPrivilegeEscalation") is False:
        argv.append("--no-new-privs")
    return argv


def binds_80(netns: str, folder: Path, privileges: list[str], proxy: str) -> bool:
    """Start ``proxy`` with ``privileges`` in ``netns``; whether 127.0.0.1:80 took a connection
    there (its output is printed: pytest shows it on a failure)."""
    if proxy == "envoy":
        (folder / "envoy.yaml").write_text(ENVOY_CONFIG)
        argv = [str(folder / "envoy"), "-c", str(folder / "envoy.yaml"), "--base-id",
                str(uuid.uuid4().int % 10_000_000), "--log-level", "warning",
                "--disable-hot-restart"]
    else:
        (folder / "haproxy.cfg").write_text(HAPROXY_CONFIG)
        argv = [str(folder / "haproxy"), "-db", "-f", str(folder / "haproxy.cfg")]
    for path in folder.iterdir():
        path.chmod(0o755)
    # The proxy's parent is a process without capabilities, as in the container: runc starts
    # the non-root entrypoint (``podway engine``, Python) with empty permitted and effective
    # sets, and it starts the proxy. (Exec'd straight from setpriv, the proxy would inherit
    # setpriv's own permitted set, and no_new_privs would not show.)
    proc = subprocess.Popen(["ip", "netns", "exec", netns, *privileges, PYTHON, "-c", SUPERVISOR,
                             *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            probe = subprocess.run(
                ["ip", "netns", "exec", netns, sys.executable, "-c",
                 "import socket; socket.create_connection(('127.0.0.1', 80), 1).close()"],
                capture_output=True, check=False)
            if probe.returncode == 0:
                return True
            time.sleep(0.2)
        return False
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(out.decode(errors="replace")[-2000:])


@pytest.mark.parametrize("proxy", ["envoy", "haproxy"])
def test_the_engine_binds_port_80_as_uid_10001(netns: str, folder: Path, proxy: str) -> None:
    source = find_envoy() if proxy == "envoy" else shutil.which("haproxy")
    if source is None:
        pytest.skip(f"{proxy} is not installed")
    shutil.copy(source, folder / proxy)
    pod, engine = engine_container()
    sc = engine["securityContext"]
    assert (sc["runAsUser"], sc["runAsNonRoot"]) == (10001, True)
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    chart = setpriv(pod, engine, 10001)
    # Without the image's file capability the added capability stays in the bounding set.
    assert binds_80(netns, folder, chart, proxy) is False
    subprocess.run([sys.executable, str(NET_BIND_CAP), str(folder / proxy)], check=True)
    assert binds_80(netns, folder, chart, proxy) is True
    # The chart's earlier allowPrivilegeEscalation: false (no_new_privs) voids file capabilities.
    assert binds_80(netns, folder, [*chart, "--no-new-privs"], proxy) is False
    # Nothing else is gained: port 80 is all the capability opens (the bounding set).
    assert "--bounding-set=-all,+net_bind_service" in chart


def test_the_file_capability_is_only_net_bind_service(folder: Path) -> None:
    target = folder / "some-binary"
    target.write_bytes(b"")
    try:
        subprocess.run([sys.executable, str(NET_BIND_CAP), str(target)], check=True)
    except subprocess.CalledProcessError:
        pytest.skip("this file system takes no security.capability attribute")
    shown = subprocess.run(["getcap", str(target)], capture_output=True, text=True,
                           check=False).stdout if shutil.which("getcap") else ""
    raw = os.getxattr(target, "security.capability")
    assert raw == bytes.fromhex("01000002" "00040000" "00000000" "00000000" "00000000")
    if shown:
        assert shown.split()[-1] == "cap_net_bind_service=ep"
