"""A bad rotation of a TLS Secret in use keeps its host on HTTPS with the last good pair, with
real Envoy (issue 23 item 8); a good rotation then takes over."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from tests.certs import GOOD_CERT, GOOD_KEY, MISMATCHED_KEY, OTHER_CERT, OTHER_KEY, tls_secret

from .harness import Stack, backend_manifests, eventually

pytestmark = pytest.mark.e2e

INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: default}
spec:
  ingressClassName: podway
  tls: [{hosts: [shop.test], secretName: cert}]
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""


async def served_certificate(port: int) -> bytes:
    """The DER certificate the engine presents for SNI shop.test."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    async with asyncio.timeout(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                  server_hostname="shop.test")
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
    return bytes(der)


def der(pem: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem)


async def test_a_bad_rotation_keeps_https_with_the_last_good_pair(stack: Stack) -> None:
    """Good pair served; the Secret rotated to a mismatched key: the host still answers HTTPS
    with the good certificate and the update says why; a good rotation is then served."""
    port = await stack.start_echo("web")
    stack.write("web.yaml", backend_manifests("web", port))
    stack.write("ingress.yaml", INGRESS)
    stack.write("secret.yaml", tls_secret("cert", "default", GOOD_CERT, GOOD_KEY))
    await stack.start()
    await eventually(lambda: _is(stack.https_port, der(GOOD_CERT)), within=10)
    generation = stack.state.generation
    stack.write("secret.yaml", tls_secret("cert", "default", GOOD_CERT, MISMATCHED_KEY))
    state = await stack.applied(generation + 1)
    assert any("last good" in e.message for e in state.update.errors)
    await asyncio.sleep(0.5)  # what the engine was pushed, if anything, has landed
    assert await served_certificate(stack.https_port) == der(GOOD_CERT)
    stack.write("secret.yaml", tls_secret("cert", "default", OTHER_CERT, OTHER_KEY))
    await eventually(lambda: _is(stack.https_port, der(OTHER_CERT)), within=10)


async def _is(port: int, want: bytes) -> bool:
    return await served_certificate(port) == want
