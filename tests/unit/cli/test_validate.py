"""``podway validate``: exit status, problem lines, the served table and the IR dump."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.cli.app import app
from podway.cli.commands import common, register
from podway.model import Snapshot
from podway.translate import TranslateOptions

register(app)
runner = CliRunner()
ROOT = Path(__file__).parents[3]


def test_quickstart_is_valid_and_shows_what_is_served() -> None:
    """The embedded example validates cleanly and lists its hosts and pools."""
    result = runner.invoke(app, ["validate", str(ROOT / "examples/quickstart")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "shop.example.com" in result.output
    assert "pool/demo/api/8080" in result.output
    assert "0 errors" in result.output


def test_problems_make_exit_status_1(tmp_path: Path) -> None:
    """A missing backend is printed with its object and field, and the exit status is 1."""
    (tmp_path / "i.yaml").write_text("""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: ns}
spec:
  ingressClassName: podway
  defaultBackend: {service: {name: nowhere, port: {number: 80}}}
""")
    result = runner.invoke(app, ["validate", str(tmp_path)], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert "Ingress/ns/i BackendNotFound: Service ns/nowhere not found" in result.output
    assert "spec.defaultBackend.service.name" in result.output


def test_load_error_makes_exit_status_1(tmp_path: Path) -> None:
    """Broken YAML is reported with its file and the exit status is 1."""
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    result = runner.invoke(app, ["validate", str(tmp_path)], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert "bad.yaml" in result.output
    assert "invalid YAML" in result.output


def test_ir_flag_dumps_yaml_without_private_keys() -> None:
    """--ir prints the IR as YAML; TLS keys appear only as a fingerprint."""
    result = runner.invoke(app, ["validate", "--ir", "--address", "198.18.0.1",
                                 str(ROOT / "examples/quickstart")])
    assert result.exit_code == 0, result.output
    assert "name: ingress/https" in result.output
    assert "fingerprint:" in result.output
    assert "PRIVATE KEY" not in result.output


def test_user_text_is_never_read_as_markup(tmp_path: Path) -> None:
    """Paths that look like rich markup are printed verbatim in the table, problems and --ir."""
    (tmp_path / "i.yaml").write_text("""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: ns}
spec:
  ingressClassName: podway
  rules:
  - host: a.example.com
    http:
      paths:
      - {path: "/x[/b]", pathType: Prefix, backend: {service: {name: gone, port: {number: 80}}}}
      - {path: "/v[a-z]", pathType: Exact, backend: {service: {name: gone, port: {number: 80}}}}
""")
    table = runner.invoke(app, ["validate", str(tmp_path)], env={"COLUMNS": "80"})
    assert table.exit_code == 1, table.output
    assert "/x[/b]" in table.output
    assert "= /v[a-z]" in table.output
    dump = runner.invoke(app, ["validate", "--ir", str(tmp_path)])
    assert "value: /x[/b]" in dump.output
    assert "value: /v[a-z]" in dump.output


def test_status_table_is_styled_not_raw_markup() -> None:
    """Status cells render their style; markup never leaks into the text."""
    result = runner.invoke(app, ["validate", str(ROOT / "examples/gateway")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "ok" in result.output
    assert "[green]" not in result.output
    assert "[red]" not in result.output


def test_table_never_wraps_addresses_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listener and member addresses stay whole (copyable) in an 80-column terminal."""
    monkeypatch.setattr(common, "stdout_is_terminal", lambda: True)
    result = runner.invoke(app, ["validate", str(ROOT / "examples/quickstart")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    for address in ("HTTP 0.0.0.0:80", "HTTPS 0.0.0.0:443", "TCP 0.0.0.0:18000",
                    "127.0.0.1:18101", "127.0.0.1:18102", "127.0.0.1:18103"):
        assert address in result.output, address


def test_objects_podway_does_not_take_are_listed_not_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An object the translator says is not Podway's (NotOwned) is listed with the reason, and
    is neither an error nor a failed exit status."""
    import podway.cli.commands.validate as command
    from podway.model import ObjectRef
    from podway.status import NOT_OWNED
    from podway.translate import Problem, Result, Severity, translate

    def with_not_owned(snapshot: Snapshot, opts: TranslateOptions) -> Result:
        result = translate(snapshot, opts)
        theirs = Problem(ref=ObjectRef("Ingress", "demo", "theirs"), reason=NOT_OWNED,
                         message="IngressClass nginx belongs to another controller",
                         severity=getattr(Severity, "INFO", Severity.WARNING))
        return replace(result, problems=(*result.problems, theirs))

    monkeypatch.setattr(command, "translate", with_not_owned)
    result = runner.invoke(app, ["validate", str(ROOT / "examples/quickstart")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "Not Podway's" in result.output
    assert "Ingress/demo/theirs" in result.output
    assert "IngressClass nginx belongs to another controller" in result.output
    assert "0 errors" in result.output
    assert "1 not Podway's" in result.output
