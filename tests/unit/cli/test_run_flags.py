"""``podway run`` flag checks that must fail before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trustme


def test_off_loopback_xds_with_tls_but_no_client_ca_is_refused(tmp_path: Path) -> None:
    """--xds-address off loopback with --xds-cert/--xds-key but no --xds-client-ca: clear error."""
    cert = trustme.CA().issue_cert("xds.podway.test")
    crt, key = tmp_path / "x.crt", tmp_path / "x.key"
    cert.cert_chain_pems[0].write_to_path(str(crt))
    cert.private_key_pem.write_to_path(str(key))
    done = subprocess.run(
        [sys.executable, "-m", "podway", "run", "--manifests", str(tmp_path),
         "--xds-address", "0.0.0.0:0", "--xds-cert", str(crt), "--xds-key", str(key),
         "--no-engine", "--log-level", "warning"],
        capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2, done.stderr
    assert "--xds-client-ca" in done.stderr
