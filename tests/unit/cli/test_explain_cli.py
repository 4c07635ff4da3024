"""``podway explain --manifests``: report, JSON, exit status; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.cli.commands import register
from podway.readers.admin_api import check_socket

register(app)
runner = CliRunner()
GOLDEN = Path(__file__).parents[2] / "golden" / "translate"


def _folder(tmp_path: Path, case: str) -> Path:
    (tmp_path / "m.yaml").write_text((GOLDEN / f"{case}.in.yaml").read_text())
    return tmp_path


def test_a_served_request_exits_0_and_names_the_pool(tmp_path: Path) -> None:
    result = runner.invoke(app, ["explain", "http://foo.example.com/", "--manifests",
                                 str(_folder(tmp_path, "ingress-hosts"))], terminal_width=80)
    assert result.exit_code == 0, result.output
    assert "verdict: served by pool/" in result.output


def test_json_verdict_and_exit_1_for_an_invalid_backend(tmp_path: Path) -> None:
    """/broken's backends are all invalid: 500, the route's problems of that rule, exit 1."""
    result = runner.invoke(app, ["explain", "http://any.test/broken", "--json", "--manifests",
                                 str(_folder(tmp_path, "gateway-backends"))])
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.output)["verdict"]
    assert {o["status"] for o in verdict["outcomes"]} == {500}
    assert verdict["fix"] == ["HTTPRoute/app/weights"]
    assert {p["field"].split(".")[1] for p in verdict["problems"]} == {"rules[2]"}


def podway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podway", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_no_source_and_a_bad_url_are_one_error_line(tmp_path: Path) -> None:
    """Neither --manifests nor --admin-socket, or a URL without scheme: exit 2, one line."""
    for args in (["http://a.test/"], ["a.test/", "--manifests", str(tmp_path)]):
        done = podway("explain", *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("error:") == 1
        assert "Traceback" not in done.stderr


def test_run_refuses_an_admin_socket_folder_open_to_others(tmp_path: Path) -> None:
    """The check runs before anything starts: exit 2 with the reason."""
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o755)
    done = podway("run", "--manifests", str(tmp_path), "--no-engine", "--xds-address",
                  f"unix:{tmp_path}/x.sock", "--admin-socket", str(folder / "podway.sock"))
    assert done.returncode == 2, done.stderr
    assert "open to other users" in done.stderr


def test_admin_socket_checks(tmp_path: Path) -> None:
    """Missing folders are made 0700; over-long paths and non-sockets are refused."""
    check_socket(tmp_path / "new" / "podway.sock")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    with pytest.raises(ConfigError, match="longer than"):
        check_socket(tmp_path / ("x" * 120))
    with pytest.raises(ConfigError, match="not a socket"):
        check_socket(tmp_path / "new")


def test_config_dump_of_a_folder_has_every_type_and_no_private_key(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "dump", "--manifests",
                                 str(_folder(tmp_path, "gateway-https"))])
    assert result.exit_code == 0, result.output
    assert "PRIVATE KEY" not in result.output
    data = yaml.safe_load(result.output)
    assert data["ir"]["listeners"]
    assert {"Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment", "Secret"} <= (
        set(data["xds"]))
    assert all(set(s) == {"name", "digest"} for s in data["xds"]["Secret"])


def test_config_dump_shows_the_kernel_ruleset_and_explain_the_dnat(tmp_path: Path) -> None:
    """A Service served by the kernel engine (podway.io/engine: kernel): ``config dump`` shows
    the nftables ruleset that serves it, ``explain`` says DNAT by the kernel engine."""
    folder = _folder(tmp_path, "engine-kernel")
    result = runner.invoke(app, ["config", "dump", "--only", "kernel", "--manifests",
                                 str(folder)])
    assert result.exit_code == 0, result.output
    ruleset = yaml.safe_load(result.output)["kernel"]
    assert "tcp . 5432 : goto" in ruleset  # no VIP in a bare folder: 0.0.0.0, any address
    assert "numgen inc mod 2" in ruleset
    (tmp_path / "other").mkdir()
    plain = runner.invoke(app, ["config", "dump", "--manifests",
                                str(_folder(tmp_path / "other", "gateway-https"))])
    assert "kernel" not in yaml.safe_load(plain.output)
    said = runner.invoke(app, ["explain", "tcp://198.18.0.10:5432", "--manifests",
                               str(folder)], terminal_width=200)
    assert "DNAT by the kernel engine to a member of pool/shop/db/5432/tcp" in said.output


def test_commands_against_a_missing_socket_are_one_error_line(tmp_path: Path) -> None:
    """Nothing listens at the socket: exit 2 and a line that names it."""
    for args in (["status"], ["config", "dump"], ["explain", "http://a.test/"]):
        done = podway(*args, "--admin-socket", str(tmp_path / "none.sock"))
        assert done.returncode == 2, done.stderr
        assert "cannot reach the admin socket" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_folder_and_a_running_instance_exclude_each_other(tmp_path: Path) -> None:
    done = podway("explain", "http://a.test/", "--manifests", str(tmp_path), "--admin-socket",
                  str(tmp_path / "s.sock"))
    assert done.returncode == 2, done.stderr
    assert "exclude each other" in done.stderr
