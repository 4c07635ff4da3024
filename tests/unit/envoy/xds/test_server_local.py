"""The xDS server's sockets and who may read Secrets: unix sockets are 0600 and replace a dead
server's file; a stream that is not authenticated never receives a Secret."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Resource
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import XdsServer


def _cache_with_a_key() -> Cache:
    message = secret_pb2.Secret(name="tls/default/shop")
    message.tls_certificate.private_key.inline_string = "-----BEGIN PRIVATE KEY-----secret"
    cache = Cache()
    cache.set({types.SECRET: {"tls/default/shop": Resource.of("tls/default/shop", message)}})
    return cache


@pytest.fixture
async def server(short_dir: Path) -> AsyncIterator[XdsServer]:
    made = XdsServer(_cache_with_a_key(), "127.0.0.1:0", unauthenticated=True)
    await made.start(local=short_dir / "xds.sock")
    try:
        yield made
    finally:
        await made.stop(grace=0)


async def _delta_secrets(target: str) -> list[str]:
    """Subscribe to the Secret by name over delta xDS; the names of the resources sent."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
        await call.write(d.DeltaDiscoveryRequest(
            type_url=types.SECRET, resource_names_subscribe=["tls/default/shop"]))
        async with asyncio.timeout(5):
            response = await call.read()
        call.cancel()
    assert isinstance(response, d.DeltaDiscoveryResponse)
    return [r.name for r in response.resources]


async def _sotw_secrets(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(d.DiscoveryRequest(type_url=types.SECRET,
                                            resource_names=["tls/default/shop"]))
        async with asyncio.timeout(5):
            response = await call.read()
        call.cancel()
    assert isinstance(response, d.DiscoveryResponse)
    return len(response.resources)


async def test_the_local_socket_is_owner_only(server: XdsServer, short_dir: Path) -> None:
    """The co-located engine's socket is mode 0600: only its owner and root may connect."""
    mode = os.stat(short_dir / "xds.sock").st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


async def test_a_dead_servers_socket_file_is_replaced(short_dir: Path) -> None:
    """A socket file left by a killed server is replaced, so a restart binds the same path."""
    path = short_dir / "xds.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what kill -9 leaves
    fresh = XdsServer(_cache_with_a_key(), "")
    await fresh.start(local=path)
    try:
        assert fresh.target == f"unix:{path}"
        assert await _delta_secrets(fresh.target) == ["tls/default/shop"]
    finally:
        await fresh.stop(grace=0)


async def test_secrets_go_over_the_unix_socket_only(server: XdsServer) -> None:
    """Over the unix socket the Secret is sent; over the opted-in clear-text TCP port it is
    withheld, in delta and in state-of-the-world, though the name is known."""
    assert server.local_target is not None
    assert await _delta_secrets(server.local_target) == ["tls/default/shop"]
    assert await _sotw_secrets(server.local_target) == 1
    tcp = f"127.0.0.1:{server.port}"
    assert await _delta_secrets(tcp) == []
    assert await _sotw_secrets(tcp) == 0


async def test_a_public_unix_socket_is_owner_only_too(short_dir: Path) -> None:
    """``--xds-address unix:/path`` outside the state folder is made 0600 before it listens."""
    path = short_dir / "public.sock"
    server = XdsServer(Cache(), f"unix:{path}")
    await server.start()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        await server.stop(grace=0)


async def test_an_engine_with_a_verified_client_certificate_gets_secrets() -> None:
    """Over mutual TLS the engine is authenticated: the Secret is sent."""
    import trustme

    from podway.envoy.xds.server import ServerTLS

    ca = trustme.CA()
    server_cert, client_cert = ca.issue_cert("xds.podway.test"), ca.issue_cert("engine")
    server = XdsServer(_cache_with_a_key(), "127.0.0.1:0", tls=ServerTLS(
        cert_pem=server_cert.cert_chain_pems[0].bytes(),
        key_pem=server_cert.private_key_pem.bytes(), client_ca_pem=ca.cert_pem.bytes()))
    await server.start()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client_cert.private_key_pem.bytes(),
        certificate_chain=client_cert.cert_chain_pems[0].bytes())
    try:
        async with grpc.aio.secure_channel(
                f"127.0.0.1:{server.port}", credentials,
                options=[("grpc.ssl_target_name_override", "xds.podway.test")]) as channel:
            call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
            await call.write(d.DeltaDiscoveryRequest(
                node=base_pb2.Node(id="engine"), type_url=types.SECRET,
                resource_names_subscribe=["tls/default/shop"]))
            async with asyncio.timeout(5):
                response = await call.read()
            call.cancel()
        assert [r.name for r in response.resources] == ["tls/default/shop"]
    finally:
        await server.stop(grace=0)


async def test_a_live_servers_socket_is_not_taken_over(server: XdsServer, short_dir: Path) -> None:
    """A second server on a socket someone still listens on gets one clear error."""
    from podway.base.errors import ConfigError

    second = XdsServer(Cache(), "")
    with pytest.raises(ConfigError, match="another server is listening"):
        await second.start(local=short_dir / "xds.sock")
    assert await _delta_secrets(f"unix:{short_dir / 'xds.sock'}") == ["tls/default/shop"]
