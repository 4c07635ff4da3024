"""Engines cannot pose as each other (issue 23.10): over mutual TLS, an ADS stream or a member
health report is served only for the node id (CN or DNS name) and engine group (an O value
``podway.io/engine-group=<group>``) its client certificate names; anything else ends with
PERMISSION_DENIED before a byte of configuration."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d
from google.protobuf import struct_pb2

from podway.engines import member_health
from podway.engines.identity import GROUP_PREFIX, EngineIdentity, from_pem
from podway.envoy import types
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import GROUP_METADATA, ServerTLS, XdsServer

from .test_server_local import _cache_with_a_key


@dataclass
class Bed:
    ca: trustme.CA
    server: XdsServer
    reports: member_health.MemberHealthReports

    def channel(self, *identities: str, common_name: str | None = None,
                organization: str | None = None) -> grpc.aio.Channel:
        if identities:
            cert = self.ca.issue_cert(*identities, common_name=common_name,
                                      organization_name=organization and
                                      GROUP_PREFIX + organization)
            key_pem, cert_pem = cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes()
        else:  # trustme would write an empty SAN, which cryptography >= 51 refuses to build
            assert common_name is not None
            assert organization is None
            key_pem, cert_pem = _common_name_only(self.ca, common_name)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca.cert_pem.bytes(), private_key=key_pem,
            certificate_chain=cert_pem)
        return grpc.aio.secure_channel(
            f"127.0.0.1:{self.server.port}", credentials,
            options=[("grpc.ssl_target_name_override", "xds.podway.test")])


def _common_name_only(ca: trustme.CA, common_name: str) -> tuple[bytes, bytes]:
    """A client certificate of ``ca`` naming ``common_name`` as its CN and no SAN at all."""
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
            cert.public_bytes(serialization.Encoding.PEM))


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    ca = trustme.CA()
    cert = ca.issue_cert("xds.podway.test")
    groups: dict[str, Cache] = {"edge": _cache_with_a_key(), "internal": _cache_with_a_key()}
    server = XdsServer(_cache_with_a_key(), "127.0.0.1:0", tls=ServerTLS(
        cert_pem=cert.cert_chain_pems[0].bytes(), key_pem=cert.private_key_pem.bytes(),
        client_ca_pem=ca.cert_pem.bytes()), groups=groups.__getitem__)
    reports = member_health.MemberHealthReports()
    server.handlers.append(reports.handler(server))
    await server.start()
    try:
        yield Bed(ca, server, reports)
    finally:
        await server.stop(grace=0)


def node(node_id: str, group: str = "") -> base_pb2.Node:
    found = base_pb2.Node(id=node_id)
    if group:
        found.metadata.CopyFrom(struct_pb2.Struct(
            fields={GROUP_METADATA: struct_pb2.Value(string_value=group)}))
    return found


async def secrets(channel: grpc.aio.Channel, node_id: str, group: str = "",
                  then: str | None = None) -> list[str] | grpc.StatusCode:
    """Subscribe to the Secret as ``node_id``; the names sent, or the status the stream ended
    with. ``then``: a second request naming that node id, after the first answer."""
    async with channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
        try:
            await call.write(d.DeltaDiscoveryRequest(
                node=node(node_id, group), type_url=types.SECRET,
                resource_names_subscribe=["tls/default/shop"]))
            async with asyncio.timeout(5):
                response = await call.read()
                if then is not None:
                    await call.write(d.DeltaDiscoveryRequest(
                        node=node(then, group), type_url=types.SECRET,
                        response_nonce=response.nonce))
                    await call.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        if response is grpc.aio.EOF:
            return await call.code()
        if then is not None:
            return await call.code()
        call.cancel()
    return [r.name for r in response.resources]


async def report(channel: grpc.aio.Channel, node_id: str, group: str = "",
                 then: str | None = None) -> grpc.StatusCode:
    """One full member health report as ``node_id`` (and one change as ``then``)."""
    messages = [member_health.encode(member_health.Message(
        node=node_id, full=True, group=group, hosts={("pool/a", "198.18.0.1:80"):
                                                     member_health.HostState(
                                                         member_health.Health.HEALTHY)}))]
    if then is not None:
        messages.append(member_health.encode(member_health.Message(
            node=then, full=False, hosts={})))
    async with channel:
        call = channel.stream_unary(member_health.PATH, request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)

        async def requests() -> AsyncIterator[bytes]:
            for message in messages:
                yield message
            await asyncio.sleep(0.3)

        try:
            async with asyncio.timeout(5):
                await call(requests())
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


async def test_an_engine_gets_secrets_as_the_node_its_certificate_names(bed: Bed) -> None:
    """The CN or a DNS name of the certificate is the node id it may claim."""
    assert await secrets(bed.channel("edge-1"), "edge-1") == ["tls/default/shop"]
    assert await secrets(bed.channel(common_name="edge-2"), "edge-2") == ["tls/default/shop"]


async def test_claiming_another_node_id_is_refused(bed: Bed) -> None:
    """A valid certificate for edge-1 cannot open a stream as edge-2, nor switch to it later,
    nor as no node at all."""
    assert await secrets(bed.channel("edge-1"), "edge-2") == grpc.StatusCode.PERMISSION_DENIED
    assert await secrets(bed.channel("edge-1"), "") == grpc.StatusCode.PERMISSION_DENIED
    assert await secrets(bed.channel("edge-1"), "edge-1", then="edge-2") \
        == grpc.StatusCode.PERMISSION_DENIED
    assert "edge-2" not in bed.server.servicer.engines


async def test_the_engine_group_is_bound_to_the_certificates_organization(bed: Bed) -> None:
    """O=edge may claim group edge only: not another group, not the whole configuration."""
    edge = {"organization": "edge"}
    assert await secrets(bed.channel("edge-1", **edge), "edge-1", "edge") \
        == ["tls/default/shop"]
    assert await secrets(bed.channel("edge-1", **edge), "edge-1", "internal") \
        == grpc.StatusCode.PERMISSION_DENIED
    assert await secrets(bed.channel("edge-1", **edge), "edge-1") \
        == grpc.StatusCode.PERMISSION_DENIED
    # A certificate naming no group is not restricted (as before engine groups).
    assert await secrets(bed.channel("edge-3"), "edge-3", "internal") == ["tls/default/shop"]


async def test_member_health_reports_are_bound_too(bed: Bed) -> None:
    """Reports for another node or group are refused and change no view; one's own count."""
    assert await report(bed.channel("edge-1"), "edge-2") == grpc.StatusCode.PERMISSION_DENIED
    assert await report(bed.channel("edge-1", organization="edge"), "edge-1", "internal") \
        == grpc.StatusCode.PERMISSION_DENIED
    assert await report(bed.channel("edge-1"), "edge-1", then="edge-2") \
        == grpc.StatusCode.PERMISSION_DENIED
    assert "edge-2" not in bed.reports.nodes
    assert await report(bed.channel("edge-1", organization="edge"), "edge-1", "edge") \
        == grpc.StatusCode.OK


def test_identity_reads_cn_dns_names_and_organizations() -> None:
    ca = trustme.CA()
    pem = ca.issue_cert("a.example", "b", common_name="node-1",
                        organization_name=GROUP_PREFIX + "edge").cert_chain_pems[0].bytes()
    found = from_pem(pem)
    assert found == EngineIdentity(names=frozenset({"node-1", "a.example", "b"}),
                                   groups=frozenset({"edge"}))
    assert found.refusal(node="b", group="edge") is None
    assert "not named" in (found.refusal(node="c", group="edge") or "")
    assert "engine groups" in (found.refusal(node="b", group="") or "")
    assert found.refusal(node="b", group=None) is None
    assert "\n" not in json.dumps(found.refusal(node="x" * 500, group=None))
    # An organization that is not a group (a company name) restricts nothing.
    plain = ca.issue_cert("n", organization_name="Example Corp").cert_chain_pems[0].bytes()
    assert from_pem(plain).groups == frozenset()
