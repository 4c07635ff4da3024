"""xDS over mutual TLS: an engine with the right CA and client certificate gets its config."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import pytest
import trustme

from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import XDS_CLUSTER, BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.server import ServerTLS
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.translate import TranslateOptions

from .harness import endpoints, eventually, free_port, service

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("sni", "san", "ok"), [
    ("xds.podway.test", "xds.podway.test", True),
    ("impostor.podway.test", "xds.podway.test", False),
    ("", "127.0.0.1", True),  # no --xds-sni: the IP of --xds is verified
    ("", "xds.podway.test", False),  # … and a certificate without it is refused
])
async def test_engine_fetches_config_over_mutual_tls(tmp_path: Path, sni: str, san: str,
                                                     ok: bool) -> None:
    """Server name and certificate verified by the engine, client certificate required by the
    server; a server whose name is not the expected one gets no engine."""
    ca = trustme.CA()
    server_cert = ca.issue_cert(san)
    client_cert = ca.issue_cert("tls-engine")  # names the node id (podway.engines.identity)
    root = tmp_path / "m"
    root.mkdir()
    lb_port = free_port()
    (root / "lb.yaml").write_text(service("lb", lb_port, 1, lb=True) + "---\n"
                                  + endpoints("lb", {"TCP": 1}))
    controller = Standalone(StandaloneOptions(
        manifests=root, engine=False, xds_address="127.0.0.1:0",
        xds_tls=ServerTLS(cert_pem=server_cert.cert_chain_pems[0].bytes(),
                          key_pem=server_cert.private_key_pem.bytes(),
                          client_ca_pem=ca.cert_pem.bytes()),
        translate=TranslateOptions(address="127.0.0.1", http_port=free_port(),
                                   https_port=free_port())))
    tasks = [asyncio.create_task(controller.run())]
    try:
        await asyncio.wait_for(controller.pipeline.wait_for(lambda s: s.generation >= 1), 10)
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(node_id="tls-engine", xds=controller.server.target,
                             xds_ca_pem=ca.cert_pem.bytes().decode(),
                             xds_sni=sni,
                             xds_client_cert_pem=client_cert.cert_chain_pems[0].bytes().decode(),
                             xds_client_key_pem=client_cert.private_key_pem.bytes().decode()))))
        tasks.append(asyncio.create_task(engine.run()))
        if not ok:
            # Wait for the event itself — Envoy refused the server's certificate — then check
            # that no stream came of it (no sleeping and hoping nothing happened).
            address = await engine.wait_started()

            async def refused() -> bool:
                found = await admin.stats(address, f"{XDS_CLUSTER}.ssl.")
                return any(v > 0 for k, v in found.items()
                           if k.endswith(("fail_verify_san", "fail_verify_error",
                                          "connection_error")))

            await eventually(refused, within=20)
            assert controller.server.servicer.streams == 0
            return
        await engine.wait_ready(limit_s=20)
        # The L4 listener exists: a connection is accepted (and closed: member port 1 refuses).
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", lb_port), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_podway_run_with_xds_tls_configures_its_own_engine(tmp_path: Path,
                                                                  short_dir: Path) -> None:
    """`podway run --xds-cert/--xds-key/--xds-client-ca` with the built-in engine serves the
    folder (the built-in engine uses its private unix socket, no client certificate)."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("xds.podway.test")
    cert, key = tmp_path / "xds.crt", tmp_path / "xds.key"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    server_cert.private_key_pem.write_to_path(str(key))
    client_ca = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(client_ca))
    root = tmp_path / "m"
    root.mkdir()
    lb_port = free_port()
    (root / "lb.yaml").write_text(service("lb", lb_port, 1, lb=True) + "---\n"
                                  + endpoints("lb", {"TCP": 1}))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "run", "--manifests", str(root), "--address",
        "127.0.0.1", "--http-port", str(free_port()), "--https-port", str(free_port()),
        "--xds-address", "127.0.0.1:0", "--xds-cert", str(cert), "--xds-key", str(key),
        "--xds-client-ca", str(client_ca), "--state-dir", str(short_dir / "s"),
        "--drain-s", "0", "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def listening() -> bool:
            # The L4 listener exists once Envoy got its config: a connection is accepted and
            # closed (member port 1 refuses).
            reader, writer = await asyncio.open_connection("127.0.0.1", lb_port)
            try:
                return await asyncio.wait_for(reader.read(), 2) == b""
            finally:
                writer.close()

        await eventually(listening, within=30)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            await process.wait()
