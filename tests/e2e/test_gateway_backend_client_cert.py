"""Gateway ``spec.tls.backend.clientCertificateRef`` through a real engine: a backend that
requires a client certificate answers through the Gateway that has one (re-encrypting under a
BackendTLSPolicy) and refuses the same route through a Gateway without one. Loopback only,
ephemeral ports, one stack per test."""

from __future__ import annotations

import asyncio
import ssl

import pytest
import trustme
import yaml

from .gateway_helpers import CLASS, gateway, indent, json_tls_backend, request, route
from .harness import Stack, free_port

pytestmark = pytest.mark.e2e


async def _mtls_backend(stack: Stack, ca: trustme.CA, client_ca: trustme.CA) -> None:
    """An HTTPS server (``secure.internal``) that requires a client certificate ``client_ca``
    issued and answers the certificate's common name."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("secure.internal").configure_cert(context)
    client_ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED

    def answer(writer: asyncio.StreamWriter) -> object:
        peer = writer.get_extra_info("peercert") or {}
        names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        return {"client": names[0] if names else ""}

    await json_tls_backend(stack, "secure", context, answer, task="mtls-backend")


async def test_gateway_client_certificate_reaches_a_backend_that_requires_one(
        engine_stack: Stack) -> None:
    stack = engine_stack
    ca, client_ca = trustme.CA(), trustme.CA()
    await _mtls_backend(stack, ca, client_ca)
    client = client_ca.issue_cert("gateway-edge", common_name="gateway-edge")
    with_cert, without = free_port(), free_port()
    edge = gateway(f"  - {{name: http, protocol: HTTP, port: {with_cert}}}\n", name="edge")
    edge = edge.replace("  listeners:\n", "  tls:\n    backend:\n"
                        "      clientCertificateRef: {name: edge-client}\n  listeners:\n")
    plain = gateway(f"  - {{name: http, protocol: HTTP, port: {without}}}\n", name="plain")
    stack.write("gw.yaml", CLASS + "---\n" + edge + "---\n" + plain)
    stack.write("tls.yaml", f"""apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: secure, namespace: default}}
spec:
  targetRefs: [{{group: "", kind: Service, name: secure}}]
  validation:
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: ca}}]
    hostname: secure.internal
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: default}}
data:
  ca.crt: |
{indent(ca.cert_pem.bytes().decode())}
---
apiVersion: v1
kind: Secret
metadata: {{name: edge-client, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{indent(client.cert_chain_pems[0].bytes().decode())}
  tls.key: |
{indent(client.private_key_pem.bytes().decode())}
""")
    stack.write("route.yaml", route("secure", """  parentRefs: [{name: edge}, {name: plain}]
  rules: [{backendRefs: [{name: secure, port: 443}]}]
"""))
    await stack.start()
    status, _, body = await request(with_cert, "x.test", "/")
    assert (status, body.get("client")) == (200, "gateway-edge")
    status, _, _ = await request(without, "x.test", "/")
    assert status == 503  # the backend refuses the handshake without a certificate
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    conditions = {c["type"]: (c["status"], c["reason"])
                  for c in objects["Gateway/default/edge"]["status"]["conditions"]}
    assert conditions["ResolvedRefs"] == ("True", "ResolvedRefs")
