"""An engine whose client certificate is renewed while it runs (issue 23.10): its IR stream and
member health reports read the certificate files at each new connection
(``ReportOptions.client_files``), so the renewed pair is used from the next one on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from podway.engines import member_health
from podway.engines.report_targets import Target
from podway.engines.reporter import ReportOptions, channel

from .test_engine_identity import Bed, bed  # noqa: F401  (the fixture)


async def report_as(opts: ReportOptions, port: int, node: str) -> grpc.StatusCode:
    message = member_health.encode(member_health.Message(node=node, full=True, hosts={}))
    async with channel(opts, Target(f"127.0.0.1:{port}", "xds.podway.test", "test")) as chan:
        call = chan.stream_unary(member_health.PATH, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)

        async def requests() -> AsyncIterator[bytes]:
            yield message
            await asyncio.sleep(0.3)

        try:
            async with asyncio.timeout(5):
                await call(requests())
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


async def test_each_new_connection_reads_the_files(bed: Bed, tmp_path: Path) -> None:  # noqa: F811
    cert_path, key_path = tmp_path / "engine-client.crt", tmp_path / "engine-client.key"

    def issue(node: str) -> None:
        cert = bed.ca.issue_cert(node)
        cert_path.write_bytes(cert.cert_chain_pems[0].bytes())
        key_path.write_bytes(cert.private_key_pem.bytes())

    issue("edge-1")
    opts = ReportOptions(node_id="edge-1", xds="127.0.0.1:0",
                         ca_pem=bed.ca.cert_pem.bytes().decode(),
                         client_files=(cert_path, key_path))
    assert await report_as(opts, bed.server.port, "edge-1") == grpc.StatusCode.OK
    issue("edge-2")  # the files replaced, as a renewal does (here: another name, to tell)
    assert await report_as(opts, bed.server.port, "edge-2") == grpc.StatusCode.OK
    assert await report_as(opts, bed.server.port, "edge-1") == grpc.StatusCode.PERMISSION_DENIED
