"""``podway migrate to-gateway``: YAML on stdout, one note per thing not carried over on stderr,
bad input as one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.test_errors import one_error_line, podway

ROOT = Path(__file__).parents[4]
CASE = ROOT / "tests/golden/migrate/not-carried.in.yaml"


def test_stdin_in_yaml_out_notes_on_stderr() -> None:
    result = subprocess.run([sys.executable, "-m", "podway", "migrate", "to-gateway", "-",
                             "--gateway-name", "edge", "--https-port", "8443"],
                            input=CASE.read_text(), capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["GatewayClass", "Gateway"]
    assert "ReferenceGrant" in kinds
    assert docs[1]["metadata"]["name"] == "edge"
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert any("configuration-snippet" in n for n in notes)
    assert result.stderr.splitlines()[-1].endswith("things not carried over (listed above)")


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "gw.yaml"
    result = podway("migrate", "to-gateway", str(CASE), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "kind: Gateway\n" in out.read_text()


@pytest.mark.parametrize(("args", "words"), [
    (["--http-port", "0"], "--http-port"),
    (["--http-port", "8080", "--https-port", "8080"], "must differ"),
    (["--gateway-name", "Not_A_Name"], "--gateway-name"),
])
def test_bad_flags_are_one_line(args: list[str], words: str) -> None:
    assert words in one_error_line(podway("migrate", "to-gateway", str(CASE), *args))


def test_input_without_ingresses_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "svc.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n")
    assert "no Ingress" in one_error_line(podway("migrate", "to-gateway", str(tmp_path)))
    assert "no such file" in one_error_line(podway("migrate", "to-gateway",
                                                   str(tmp_path / "nope")))
