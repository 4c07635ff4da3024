"""Bad input or a hostile environment: one ``error:`` line and exit status 2, never a traceback
(``--log-level debug`` adds it). Runs the real entry point, as a user would."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
QUICKSTART = str(ROOT / "examples/quickstart")


def podway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podway", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize(("command", "flag", "value"), [
    ("run", "--http-port", "-1"), ("run", "--http-port", "70000"), ("run", "--https-port", "0"),
    ("run", "--metrics-port", "-5"), ("validate", "--http-port", "0"),
    ("demo", "--https-port", "65536"), ("echo", "--port", "0")])
def test_port_flags_outside_1_to_65535_are_refused(command: str, flag: str, value: str) -> None:
    """-1 gave a traceback, 70000 ran with no listener, 0 picked a random port in silence."""
    args = [command, flag, value]
    if command == "run":
        args += ["--manifests", QUICKSTART]
    elif command == "validate":
        args.append(QUICKSTART)
    line = one_error_line(podway(*args))
    assert f"{flag} must be a port number from 1 to 65535" in line
    assert value in line


@pytest.mark.parametrize("args", [
    ["run", "--manifests", QUICKSTART, "--address", "localhost:80"],
    ["validate", "--address", "not-an-ip", QUICKSTART],
    ["demo", "--address", "198.18.0.1"],
    ["run", "--manifests", QUICKSTART, "--concurrency", "0"],
    ["engine", "--xds", "unix:/nonexistent/xds.sock", "--health-report-s", "-1"],
    ["engine", "--xds", "unix:/nonexistent/xds.sock", "--engine", "nginx"],
    ["engine", "--engine", "kernel", "--xds", "unix:/a.sock", "--xds", "127.0.0.1:1"],
    ["diagram", "--manifests", QUICKSTART, "--engine", "nginx"],
    ["controller", "--npl-unsigned", "--xds-listen", "127.0.0.1:18000",
     "--xds-unauthenticated", "--vip-pools-from", "metal"]])
def test_other_bad_flags_are_one_line(args: list[str]) -> None:
    """Addresses that are not IPs (or not loopback for the demo), zero workers, a negative
    report interval, an unknown pool kind: one line naming the flag."""
    line = one_error_line(podway(*args))
    flag = next(a for a in reversed(args) if a.startswith("--"))
    assert flag in line


def test_echo_on_a_taken_port_is_one_line(taken_port: int) -> None:
    """`podway echo` on a port in use said so in a 51-line OSError traceback."""
    line = one_error_line(podway("echo", "--port", str(taken_port)))
    assert f"127.0.0.1:{taken_port}" in line
    assert "Address already in use" in line


def test_debug_log_level_adds_the_traceback(taken_port: int) -> None:
    """With --log-level debug the explained error still ends the output, after its traceback."""
    result = podway("echo", "--port", str(taken_port), "--log-level", "debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot listen")


def test_validate_unwritable_status_file_is_one_line(tmp_path: Path) -> None:
    """validate --status-file into a missing folder: the reason, exit status 2."""
    target = tmp_path / "missing" / "status.yaml"
    line = one_error_line(podway("validate", "--status-file", str(target), QUICKSTART))
    assert str(target) in line


def test_demo_with_a_backend_port_taken_is_one_line() -> None:
    """A second `podway demo` (its echo backend's port taken) says so in one line, exit 2."""
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", 18101))  # web-0's port in examples/quickstart
        except OSError:
            pytest.skip("port 18101 is in use here (a demo is running)")
        holder.listen()
        line = one_error_line(podway("demo", "--once", "--http-port", "1", "--https-port", "2"))
    assert "18101" in line
    assert "another `podway demo`" in line


@pytest.mark.parametrize("args", [
    ["validate", "--tls-min-version", "1.4", QUICKSTART],
    ["validate", "--tls-ciphers", "RC4-MD5", QUICKSTART],
    ["run", "--manifests", QUICKSTART, "--tls-min-version", "1.3", "--tls-max-version", "1.2"]])
def test_bad_tls_flags_are_one_line(args: list[str]) -> None:
    """A TLS version or cipher the engine would refuse stops the command with one line."""
    line = one_error_line(podway(*args))
    assert "--tls-" in line
