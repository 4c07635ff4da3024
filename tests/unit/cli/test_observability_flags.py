"""Dashboard and metrics flags: a bad value is one clear line, before anything starts."""

from __future__ import annotations

import socket
from pathlib import Path

from .test_errors import QUICKSTART, one_error_line, podway


def test_a_dashboard_off_loopback_needs_the_explicit_flag() -> None:
    """The page has no login: 0.0.0.0 is refused with the reason and the flag that allows it."""
    line = one_error_line(podway("run", "--manifests", QUICKSTART, "--dashboard-port", "9",
                                 "--dashboard-address", "0.0.0.0"))
    assert "--dashboard-address 0.0.0.0 is not loopback" in line
    assert "--dashboard-allow-remote" in line


def test_dashboard_and_metrics_ports_are_checked() -> None:
    """Ports outside 1-65535 (0: off) are refused on run and engine alike."""
    line = one_error_line(podway("run", "--manifests", QUICKSTART, "--dashboard-port", "70000"))
    assert "--dashboard-port must be a port number" in line
    line = one_error_line(podway("engine", "--xds", "127.0.0.1:1", "--metrics-port", "-2"))
    assert "--metrics-port must be a port number" in line


def test_envoy_stats_takes_only_its_two_values() -> None:
    result = podway("run", "--manifests", QUICKSTART, "--envoy-stats", "all")
    assert result.returncode == 2
    assert "bounded" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_dashboard_port_in_use_is_one_line(tmp_path: Path) -> None:
    """The dashboard cannot bind: one line naming it and the address, not a traceback (its own
    state folder: another Podway on this machine holding the default one does not matter)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken_port = holder.getsockname()[1]
        line = one_error_line(podway("run", "--manifests", QUICKSTART, "--log-level", "error",
                                     "--http-port", "18082",
                                     "--https-port", "18445", "--dashboard-port",
                                     str(taken_port), "--state-dir", str(tmp_path / "state")))
    assert line == (f"error: cannot serve the dashboard on 127.0.0.1:{taken_port}: "
                    "address already in use")
