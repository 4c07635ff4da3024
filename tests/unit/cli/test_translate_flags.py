"""``validate`` passes the translator's policy flags through (manifest addresses, host owners)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from podway.cli import app
from podway.commands import register

register(app)
runner = CliRunner()

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: net}
spec: {type: LoadBalancer, loadBalancerIP: 198.18.0.53, ports: [{port: 5353}]}
"""


def test_manifest_addresses_flag_lets_a_vip_bind(tmp_path: Path) -> None:
    """Without the flag the VIP is refused with a warning; with it, the listener binds it."""
    (tmp_path / "s.yaml").write_text(SERVICE)
    plain = runner.invoke(app, ["validate", "--ir", "--address", "198.18.0.1", str(tmp_path)],
                          env={"COLUMNS": "200"})
    assert "AddressNotAllowed" in plain.output
    assert "address: 198.18.0.53" not in plain.output
    allowed = runner.invoke(app, ["validate", "--ir", "--address", "198.18.0.1",
                                  "--manifest-addresses", str(tmp_path)], env={"COLUMNS": "200"})
    assert allowed.exit_code == 0, allowed.output
    assert "address: 198.18.0.53" in allowed.output
    assert "AddressNotAllowed" not in allowed.output
