"""``podway controller``: no cluster is one ``error:`` line (exit 2), never a traceback; the
health, readiness and metrics endpoints answer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import free_port

from .bed import Bed, lb_service


def podway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``podway controller ARGS`` (xDS on loopback, clear text, unless ARGS say otherwise)."""
    base = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    xds = [] if "--xds-listen" in args else ["--xds-listen", "127.0.0.1:18000",
                                             "--xds-unauthenticated"]
    return subprocess.run([sys.executable, "-m", "podway", "controller", *xds, *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**base, **(env or {})})


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:PORT"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize(("args", "expected"), [
    ((), "not running inside a Kubernetes cluster"),
    (("--kubeconfig", "/nonexistent/kubeconfig"), "no such file"),
    (("--kubeconfig", "{unreachable}"), "cannot reach the Kubernetes API"),
    (("--xds-listen", "0.0.0.0:18000"), "--xds-client-ca"),
    (("--xds-listen", "127.0.0.1:18000"), "--xds-unauthenticated"),
    (("--lb-address", "engine.example"), "--lb-address must be an IP address"),
    (("--namespace-selector", "a in (b"), "--namespace-selector"),
    (("--engine-admin", "/tmp/admin.sock"), "--engine-admin '/tmp/admin.sock' is not unix:/path"),
    (("--dashboard-port", "18090", "--dashboard-address", "0.0.0.0"),
     "--dashboard-allow-remote"),
    (("--admin-socket", "/" + "a" * 120 + "/podway.sock"), "longer than 107 bytes"),
    (("--leader-elect=maybe",), "--leader-elect must be true or false"),
    (("--renew-deadline-s", "20"), "--renew-deadline-s must be shorter than --lease-duration-s"),
    (("--config", "/nonexistent/podway.yaml"), "--config /nonexistent/podway.yaml: cannot read"),
])
def test_no_cluster_or_bad_flags_are_one_line(tmp_path: Path, args: tuple[str, ...],
                                              expected: str) -> None:
    """Every way to start without a usable cluster or with a bad flag says so in one line."""
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG.replace("PORT", str(free_port())))
    line = one_error_line(podway(*(a.format(unreachable=config) for a in args)))
    assert expected in line


async def test_health_readiness_and_metrics(bed: Bed) -> None:
    """/healthz, /readyz (after the first snapshot) and Prometheus metrics on --metrics-port."""
    bed.emu.put("services", lb_service("web", 9001))
    port = free_port()
    await bed.start(metrics_port=port, metrics_address="127.0.0.1")
    await bed.until(lambda s: len(s.ir.listeners) == 1)

    async def fetch(path: str) -> tuple[int, str]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = (await reader.read()).decode()
        writer.close()
        return int(data.split()[1]), data

    assert (await fetch("/healthz"))[0] == 200
    assert (await fetch("/readyz"))[0] == 200
    status, text = await fetch("/metrics")
    assert status == 200
    assert 'podway_controller_objects{kind="Service"}' in text
    for name in ("podway_pipeline_stage_duration_seconds", "podway_xds_pushes_total",
                 "podway_controller_status_writes_total", "podway_controller_queue_depth",
                 "podway_controller_watch_relists"):
        assert name in text


def test_bad_vip_pools_file_is_one_line(tmp_path: Path) -> None:
    """--vip-pools: a missing file or a bad entry is one error line naming it."""
    assert "cannot read" in one_error_line(podway("--vip-pools", str(tmp_path / "none.yaml")))
    bad = tmp_path / "pools.yaml"
    bad.write_text("pools: [{name: a, addresses: [198.18.0.0/33]}]\n")
    assert "VIP pool 'a': '198.18.0.0/33'" in one_error_line(podway("--vip-pools", str(bad)))
