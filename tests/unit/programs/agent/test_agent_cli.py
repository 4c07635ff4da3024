"""``podway agent``: flags are checked, and a bad environment is one line, before any work."""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from podway.cli.commands import register


def app() -> typer.Typer:
    made = typer.Typer()
    register(made)
    return made


@pytest.mark.parametrize(("args", "complaint"), [
    (["agent"], "--node-name"),
    (["agent", "--node-name", "n", "--port-range", "61000-70000"], "--port-range"),
    (["agent", "--node-name", "n", "--port-range", "62000-61000"], "--port-range"),
    (["agent", "--node-name", "n", "--rules", "ebpf"], "--rules"),
])
def test_bad_flags_exit_with_usage_error(args: list[str], complaint: str) -> None:
    """Missing node name, a bad port range or backend exit 2 naming the flag."""
    result = CliRunner().invoke(app(), args, env={"NODE_NAME": ""})
    assert result.exit_code == 2
    assert complaint in result.output


def test_cleanup_is_a_subcommand() -> None:
    """``podway agent cleanup --help`` works without --node-name."""
    result = CliRunner().invoke(app(), ["agent", "cleanup", "--help"])
    assert result.exit_code == 0
    assert "Remove every kernel rule" in result.output


def test_outside_a_cluster_is_one_line_and_nonzero(monkeypatch: pytest.MonkeyPatch) -> None:
    """No --kubeconfig and no in-cluster env: one line saying what to do, exit 2, no traceback."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = subprocess.run([sys.executable, "-m", "podway", "agent", "--node-name", "n1",
                             "--metrics-address", ""],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not running inside a Kubernetes cluster" in lines[0]
    assert "--kubeconfig" in lines[0]


def test_missing_kubeconfig_says_no_such_file(tmp_path: Path) -> None:
    """--kubeconfig naming a missing file says exactly that, in one line."""
    missing = tmp_path / "nope.yaml"
    result = subprocess.run([sys.executable, "-m", "podway", "agent", "--node-name", "n1",
                             "--kubeconfig", str(missing), "--metrics-address", ""],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --kubeconfig {missing}: no such file"


def test_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    """A kubeconfig pointing at nothing fails at start with one line, not retries forever."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "x", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    result = subprocess.run([sys.executable, "-m", "podway", "agent", "--node-name", "n1",
                             "--kubeconfig", str(kubeconfig), "--metrics-address", ""],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach the Kubernetes API" in lines[0]


def test_bad_kubeconfig_content_is_one_line(tmp_path: Path) -> None:
    """A file that is not a kubeconfig is named with the loader's reason, in one line."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    result = subprocess.run([sys.executable, "-m", "podway", "agent", "--node-name", "n1",
                             "--kubeconfig", str(bad), "--metrics-address", ""],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --kubeconfig {bad}: not a usable kubeconfig")


def test_unknown_netns_is_one_line() -> None:
    """A network namespace that does not exist is named in one line, not a thread traceback."""
    from podway.base.errors import ConfigError
    from podway.programs.agent.netns import single_thread

    with pytest.raises(ConfigError, match="--netns podway-no-such-ns: no such network namespace"):
        single_thread(netns="podway-no-such-ns", name="t")


def test_metrics_listen_on_loopback_by_default() -> None:
    """With host networking, 0.0.0.0 would open the agent's metrics to every network the node
    is on: the default is loopback (the chart passes the node's address)."""
    from podway.cli.commands.agent import agent

    default = inspect.signature(agent).parameters["metrics_address"].default
    assert default == "127.0.0.1:9464"
