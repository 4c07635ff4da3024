"""``podway controller --engine-account`` (issue 23.10): the signer's settings from the flags,
a bad value as one line, and client certificates required on TCP once the engines' own CA is
trusted, even without ``--xds-client-ca``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from podway.base.errors import ConfigError
from podway.cli.commands.controller import _server_tls, engine_cert_settings
from podway.envoy.xds.server import check_bind

EDGE = "system:serviceaccount:podway-system:podway-engine-edge"


def test_accounts_map_to_groups_and_none_means_no_signer() -> None:
    found = engine_cert_settings([f"{EDGE}=edge", "system:serviceaccount:p:all="],
                                 "engine-ca", "p")
    assert found is not None
    assert dict(found.users) == {EDGE: "edge", "system:serviceaccount:p:all": ""}
    assert (found.namespace, found.ca_secret) == ("p", "engine-ca")
    assert engine_cert_settings([], "engine-ca", "p") is None


@pytest.mark.parametrize("value", [EDGE, "podway-engine-edge=edge", "system:serviceaccount::x=e",
                                   "system:user:a:b=e"])
def test_a_bad_account_is_one_line(value: str) -> None:
    with pytest.raises(ConfigError, match="--engine-account") as refused:
        engine_cert_settings([value], "engine-ca", "p")
    assert "\n" not in str(refused.value)


def test_one_account_cannot_serve_two_groups() -> None:
    with pytest.raises(ConfigError, match="two engine groups"):
        engine_cert_settings([f"{EDGE}=edge", f"{EDGE}=internal"], "engine-ca", "p")


def test_the_engine_ca_alone_makes_the_listener_require_client_certificates(
        tmp_path: Path) -> None:
    cert = trustme.CA().issue_cert("xds.podway.test")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    without = _server_tls(tmp_path / "tls.crt", tmp_path / "tls.key", None)
    with pytest.raises(ConfigError, match="--xds-client-ca"):
        check_bind("0.0.0.0:18000", without)
    tls = _server_tls(tmp_path / "tls.crt", tmp_path / "tls.key", None, engine_ca=True)
    assert tls is not None
    assert tls.client_ca_pem == b""  # the signer's CA is added at start
    check_bind("0.0.0.0:18000", tls)
