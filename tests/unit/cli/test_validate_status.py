"""``podway validate`` with Gateway API objects: the status table and ``--status-file``."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from podway.cli.app import app
from podway.cli.commands import register

register(app)
runner = CliRunner()
CASES = Path(__file__).parents[2] / "golden/translate"


def test_status_file_holds_api_shaped_status(tmp_path: Path) -> None:
    """--status-file writes the status document: every object, API status in Kubernetes form."""
    out = tmp_path / "status.yaml"
    result = runner.invoke(app, ["validate", "--status-file", str(out), "--manifest-addresses",
                                 str(CASES / "gateway-basic-http.in.yaml")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    objects = yaml.safe_load(out.read_text())["objects"]
    with_status = [ref for ref, entry in objects.items() if "status" in entry]
    assert with_status == ["Gateway/infra/web", "GatewayClass/podway", "HTTPRoute/shop/shop"]
    assert all(entry["accepted"] for entry in objects.values() if entry.get("owned", True))
    assert [ref for ref, e in objects.items() if not e.get("owned", True)] == [
        "Gateway/infra/not-ours"]
    gateway = objects["Gateway/infra/web"]["status"]
    assert gateway["listeners"][0]["attachedRoutes"] == 1
    assert {c["type"]: c["status"] for c in gateway["conditions"]} == {
        "Accepted": "True", "Programmed": "True"}
    parent = objects["HTTPRoute/shop/shop"]["status"]["parents"][0]
    assert parent["parentRef"]["name"] == "web"
    assert parent["conditions"][0]["observedGeneration"] == 7


def test_status_table_shows_failed_conditions() -> None:
    """The status table names each failed condition with its reason; exit status is 1."""
    result = runner.invoke(app, ["validate", str(CASES / "gateway-allowed-routes.in.yaml")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert "Accepted=False(NoMatchingParent)" in result.output
    assert "ResolvedRefs=False(InvalidRouteKinds)" in result.output


def test_gateway_example_is_valid() -> None:
    """examples/gateway validates cleanly: its route is attached and every condition is ok."""
    root = Path(__file__).parents[3]
    result = runner.invoke(app, ["validate", str(root / "examples/gateway")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "listener http (1 routes)" in result.output
    assert "0 errors, 0 warnings" in result.output
