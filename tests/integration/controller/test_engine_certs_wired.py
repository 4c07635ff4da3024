"""Per-engine certificates end to end (issue 23.10): ``podway engine`` given no client
certificate asks the controller's signer through the CertificateSigningRequest API, and its
Envoy then holds an mTLS xDS stream with that certificate; the controller's xDS server trusts
the CA it made itself. A forged request (another node, another group, another service account)
gets no certificate, and a certificate of one group gets no other group's configuration."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
import trustme
from cryptography import x509
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d
from google.protobuf import struct_pb2
from kubernetes_asyncio import client

from podway.base.errors import EnvironmentProblem
from podway.engines.identity import from_pem
from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.server import GROUP_METADATA, ServerTLS
from podway.kube.npl_keys import NODE_EXTRA
from podway.programs import engine_cert
from podway.programs.controller.engine_certs import EngineCertSettings
from tests.waiting import eventually

from .bed import Bed

NS = "podway-system"
EDGE = f"system:serviceaccount:{NS}:podway-engine-edge"
INTERNAL = f"system:serviceaccount:{NS}:podway-engine-internal"
SNI = "xds.podway.test"


def kubeconfig(path: Path, url: str, token: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: emu, cluster: {{server: '{url}'}}}}]\n"
        f"users: [{{name: engine, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: emu, context: {cluster: emu, user: engine}}]\n"
        "current-context: emu\n")
    return path


async def start(bed: Bed, ca: trustme.CA) -> int:
    server = ca.issue_cert(SNI)
    controller = await bed.start(
        xds_unauthenticated=False,
        xds_tls=ServerTLS(cert_pem=server.cert_chain_pems[0].bytes(),
                          key_pem=server.private_key_pem.bytes(), client_ca_pem=b""),
        engine_certs=EngineCertSettings(users={EDGE: "edge", INTERNAL: "internal"},
                                        namespace=NS, ca_secret="podway-engine-ca"))
    assert controller.server is not None
    return controller.server.port


def as_token(bed: Bed, token: str) -> client.ApiClient:
    config = client.Configuration(host=bed.emu.url)
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration=config)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["envoy", "haproxy"])
async def test_an_engine_without_cert_files_gets_one_and_serves_over_mtls(
        bed: Bed, tmp_path: Path, kind: str) -> None:
    """Envoy over ADS; HAProxy over the IR stream (the same server, TLS and identity)."""
    ca = trustme.CA()  # the controller's server certificate only: engines trust it
    port = await start(bed, ca)
    bed.emu.add_user("engine-n1", EDGE, extra={NODE_EXTRA: ["n1"]})
    ca.cert_pem.write_to_path(str(tmp_path / "xds-ca.crt"))
    state = tmp_path / "state"
    with (tmp_path / "engine.log").open("wb") as log:
        engine = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "engine", f"--xds=127.0.0.1:{port}",
            f"--xds-ca={tmp_path / 'xds-ca.crt'}", f"--xds-sni={SNI}", "--node-id=n1",
            "--engine-group=edge", f"--state-dir={state}", "--health-report-s=0",
            "--drain-s=0", f"--engine={kind}",
            f"--kubeconfig={kubeconfig(tmp_path / 'kc', bed.emu.url, 'engine-n1')}",
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert bed.controller is not None
        assert bed.controller.server is not None
        streams = bed.controller.server.servicer if kind == "envoy" else bed.controller.feed
        await eventually(lambda: "n1" in streams.engine_groups or engine.returncode is not None,
                         within=60, every=0.2)
        assert engine.returncode is None, (tmp_path / "engine.log").read_text()
        assert streams.engine_groups.get("n1") == "edge"
    finally:
        engine.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(engine.wait(), 30)
        except TimeoutError:
            engine.kill()
            await engine.wait()
    for name in (engine_cert.CERT_FILE, engine_cert.KEY_FILE):  # kept for the next start
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600
    pem = (state / engine_cert.CERT_FILE).read_bytes()
    secret = bed.emu.get("secrets", NS, "podway-engine-ca")
    assert secret is not None
    issuer = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    x509.load_pem_x509_certificate(pem).verify_directly_issued_by(issuer)
    named = from_pem(pem)
    assert (named.names, named.groups) == ({"n1"}, {"edge"})
    # A restart within the certificate's life reuses it: no second request.
    assert engine_cert.reusable(state, node="n1", group="edge") is not None
    assert engine_cert.reusable(state, node="n1", group="internal") is None


async def ads_secret(port: int, ca: trustme.CA, cert: engine_cert.ClientCert, node: str,
                     group: str) -> list[str] | grpc.StatusCode:
    """Subscribe to a Secret as ``node``/``group`` with ``cert``: what was sent, or the status
    the stream ended with."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(), private_key=cert.key_pem.encode(),
        certificate_chain=cert.cert_pem.encode())
    meta = struct_pb2.Struct(fields={GROUP_METADATA: struct_pb2.Value(string_value=group)})
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=[
            ("grpc.ssl_target_name_override", SNI)]) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
        try:
            await call.write(d.DeltaDiscoveryRequest(
                node=base_pb2.Node(id=node, metadata=meta), type_url=types.LISTENER))
            async with asyncio.timeout(10):
                response = await call.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        if response is grpc.aio.EOF:
            return await call.code()
        call.cancel()
        return [r.name for r in response.resources]


async def test_forged_requests_get_no_certificate_and_no_config(
        bed: Bed, tmp_path: Path) -> None:
    ca = trustme.CA()
    port = await start(bed, ca)
    bed.emu.add_user("edge-on-n1", EDGE, extra={NODE_EXTRA: ["n1"]})
    bed.emu.add_user("edge-on-n2", EDGE, extra={NODE_EXTRA: ["n2"]})
    bed.emu.add_user("tenant-on-n1", "system:serviceaccount:shop:default",
                     extra={NODE_EXTRA: ["n1"]})

    async def ask(token: str, node: str, group: str) -> engine_cert.ClientCert:
        folder = tmp_path / f"{token}-{node}-{group}"
        folder.mkdir()
        async with as_token(bed, token) as api:
            async with asyncio.timeout(20):
                return await engine_cert.obtain(api, folder, node=node, group=group,
                                                poll_s=0.05)

    good = await ask("edge-on-n1", "n1", "edge")
    forged = {"another node": ("edge-on-n2", "n1", "edge"),
              "another group": ("edge-on-n1", "n1", "internal"),
              "no group (everything)": ("edge-on-n1", "n1", ""),
              "another service account": ("tenant-on-n1", "n1", "edge")}
    for what, (token, node, group) in forged.items():
        with pytest.raises(EnvironmentProblem, match="refused this engine a certificate"):
            await ask(token, node, group)
        assert not list((tmp_path / f"{token}-{node}-{group}").iterdir()), what
    # The signed certificate is good for its own group's configuration only.
    assert isinstance(await ads_secret(port, ca, good, "n1", "edge"), list)
    assert await ads_secret(port, ca, good, "n1", "internal") \
        == grpc.StatusCode.PERMISSION_DENIED
    assert await ads_secret(port, ca, good, "n2", "edge") == grpc.StatusCode.PERMISSION_DENIED
    # The command itself: a forged claim stops it with the controller's reason, one line.
    ca.cert_pem.write_to_path(str(tmp_path / "xds-ca.crt"))
    forging = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "engine", f"--xds=127.0.0.1:{port}",
        f"--xds-ca={tmp_path / 'xds-ca.crt'}", f"--xds-sni={SNI}", "--node-id=n1",
        "--engine-group=edge", f"--state-dir={tmp_path / 'forger'}",
        f"--kubeconfig={kubeconfig(tmp_path / 'kc', bed.emu.url, 'edge-on-n2')}",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = await asyncio.wait_for(forging.communicate(), 60)
    lines = err.decode().strip().splitlines()
    assert forging.returncode == 2, lines
    assert lines[-1].startswith("error: the controller refused this engine a certificate")
    assert "runs on 'n2'" in lines[-1]
    assert not [line for line in lines if "Traceback" in line]
    # A certificate from another CA (not the controller's, not configured) is not trusted.
    stranger = trustme.CA().issue_cert("n1", organization_name="podway.io/engine-group=edge")
    other = engine_cert.ClientCert(stranger.cert_chain_pems[0].bytes().decode(),
                                   stranger.private_key_pem.bytes().decode(),
                                   tmp_path / "x", tmp_path / "y")
    assert await ads_secret(port, ca, other, "n1", "edge") == grpc.StatusCode.UNAVAILABLE


def serials(certs_json: str) -> set[int]:
    """Serial numbers of the certificates Envoy's TLS contexts hold (admin ``/certs``: hex,
    padded to whole bytes)."""
    found = json.loads(certs_json)
    return {int(str(c.get("serial_number")), 16) for ctx in found.get("certificates") or []
            for c in ctx.get("cert_chain") or []}


@pytest.mark.e2e
async def test_a_running_engine_renews_its_certificate_and_envoy_takes_it(
        bed: Bed, tmp_path: Path) -> None:
    ca = trustme.CA()
    port = await start(bed, ca)
    bed.emu.add_user("edge-on-n1", EDGE, extra={NODE_EXTRA: ["n1"]})
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    async with as_token(bed, "edge-on-n1") as api, asyncio.timeout(20):
        first = await engine_cert.obtain(api, folder, node="n1", group="edge", poll_s=0.05)
    sds = engine_cert.write_sds(folder, first)
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id="n1", xds=f"127.0.0.1:{port}", engine_group="edge",
                         xds_ca_pem=ca.cert_pem.bytes().decode(), xds_sni=SNI,
                         xds_client_sds=str(sds)))))
    bed.engines.append(engine)
    bed.tasks.append(asyncio.create_task(engine.run(), name="engine-n1"))
    await engine.wait_ready(limit_s=30)
    assert bed.controller is not None
    assert bed.controller.server is not None
    servicer = bed.controller.server.servicer
    await eventually(lambda: "n1" in servicer.engines, within=30)
    assert engine.admin_address is not None
    admin_address = engine.admin_address

    async def held() -> set[int]:
        return serials((await admin.request(admin_address, "/certs"))[1])

    old = x509.load_pem_x509_certificate(first.cert_pem.encode()).serial_number
    assert old in await held()
    # Two thirds into its life (the clock says so once), the engine renews.
    times = iter([engine_cert.renew_at(first.cert_pem) + 1])
    renewed: list[engine_cert.ClientCert] = []
    renewal = asyncio.create_task(engine_cert.keep_renewed(
        lambda: _connected(bed, "edge-on-n1"), folder, first, node="n1", group="edge",
        on_renewed=renewed.append, clock=lambda: next(times, time.time())))
    try:
        await eventually(lambda: renewed, within=20)
        new = x509.load_pem_x509_certificate(renewed[0].cert_pem.encode()).serial_number
        assert new != old
        await eventually(lambda: _holds(held, new), within=20)
    finally:
        renewal.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewal
    assert (folder / engine_cert.CERT_FILE).read_text() == renewed[0].cert_pem
    for name in (engine_cert.CERT_FILE, engine_cert.KEY_FILE, engine_cert.SDS_FILE):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert renewed[0].key_pem != first.key_pem  # a new key, not the old one signed again
    assert "n1" in servicer.engines


async def _connected(bed: Bed, token: str) -> client.ApiClient:
    return as_token(bed, token)


async def _holds(held: Callable[[], Awaitable[set[int]]], serial: int) -> bool:
    return serial in await held()
