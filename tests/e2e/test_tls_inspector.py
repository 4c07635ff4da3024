"""The TLS inspector comes and goes with the first chain chosen by SNI (docs/performance.md):
a listener with one certificate, named or not, has its default chain only and no inspector;
a second certificate brings both, so the HTTPS listener's filters change, and Envoy replaces
the listener and drains its connections instead of updating its chains in place. Under
steady HTTPS keep-alive load, with a real Envoy and Podway's own drain (``--drain-s`` 2, as
``podway run``), adding a second host's certificate and route, and removing them again,
fails no request: from a listener whose one certificate names no host, and from one whose
one certificate names its host."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from podway.envoy.engine import admin
from tests.certs import GOOD_CERT, GOOD_KEY, OTHER_CERT, OTHER_KEY, tls_secret

from .harness import Stack, backend_manifests, eventually
from .local_servers import stack_in

pytestmark = pytest.mark.e2e

INSPECTOR = "envoy.filters.listener.tls_inspector"
ANY_HOST = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: default}
spec:
  ingressClassName: podway
  tls: [{secretName: cert}]
  rules:
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""
ONE_NAMED = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: default}
spec:
  ingressClassName: podway
  tls: [{hosts: [example.com], secretName: cert}]
  rules:
  - host: example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""
NAMED = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other, namespace: default}
spec:
  ingressClassName: podway
  tls: [{hosts: [other.example.com], secretName: other}]
  rules:
  - host: other.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: other, port: {number: 80}}}}
"""
WORKERS = 4


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path, drain_s=2.0) as made:
        yield made


def _client() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                   ) -> tuple[int, bool]:
    """One keep-alive request: its status and whether the engine closes the connection."""
    writer.write(b"GET /load HTTP/1.1\r\nHost: example.com\r\n\r\n")
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    got = {k.strip().lower(): v.strip() for k, _, v in
           (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(got.get("content-length", "0")))
    return int(head[0].split(" ")[1]), got.get("connection") == "close"


async def _load(port: int, stop: asyncio.Event, counts: Counter[str]) -> None:
    """Back-to-back requests on one HTTPS keep-alive connection; a new connection only when
    the engine says ``Connection: close``. Anything else that ends a request is a failure."""
    context = _client()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="example.com")
        except OSError as exc:
            counts[f"failed-connect {exc!r}"] += 1
            continue
        counts["connections"] += 1
        try:
            while not stop.is_set():
                try:
                    status, closing = await asyncio.wait_for(_request(reader, writer), 10)
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    counts[f"failed {type(exc).__name__}"] += 1
                    break
                counts["ok" if status == 200 else f"failed {status}"] += 1
                if closing:
                    counts["closed by the engine"] += 1
                    break
        finally:
            writer.close()


async def _listener(stack: Stack) -> dict[str, object]:
    address = await (await stack.engine()).wait_started()
    status, body = await admin.request(address, "/config_dump?resource=dynamic_listeners",
                                       limit_s=10)
    assert status == 200, body
    dump = json.loads(body)
    for item in dump["configs"]:
        if item["name"].endswith("https") and "active_state" in item:
            found: dict[str, object] = item["active_state"]["listener"]
            return found
    raise AssertionError("no HTTPS listener")


async def _inspected(stack: Stack) -> bool:
    filters = (await _listener(stack)).get("listener_filters", [])
    assert isinstance(filters, list)
    return any(f["name"] == INSPECTOR for f in filters)


async def _served_certificate(port: int, sni: str) -> bytes:
    async with asyncio.timeout(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client(),
                                                  server_hostname=sni)
        try:
            return bytes(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
        finally:
            writer.close()


@pytest.mark.parametrize("first", [ANY_HOST, ONE_NAMED], ids=["unnamed", "named"])
async def test_a_second_certificate_replaces_the_listener_without_a_failed_request(
        stack: Stack, first: str) -> None:
    web, other = await stack.start_echo("web"), await stack.start_echo("other")
    stack.write("web.yaml", backend_manifests("web", web))
    stack.write("other.yaml", backend_manifests("other", other))
    stack.write("cert.yaml", tls_secret("cert", "default", GOOD_CERT, GOOD_KEY))
    stack.write("shop.yaml", first)
    await stack.start()
    await eventually(lambda: _served_certificate(stack.https_port, "example.com"), within=10)
    assert not await _inspected(stack)  # one chain, chosen without reading the hello
    assert not (await _listener(stack)).get("filter_chains")  # its default chain only
    address = await (await stack.engine()).wait_started()
    counts: Counter[str] = Counter()
    stop = asyncio.Event()
    workers = [asyncio.create_task(_load(stack.https_port, stop, counts))
               for _ in range(WORKERS)]
    try:
        await eventually(lambda: _at_least(counts, "ok", 200), within=20)
        before = await admin.stats(address, "listener_manager.listener_modified")
        for step in ("add", "remove"):
            served = counts["ok"]
            generation = stack.state.generation
            if step == "add":
                stack.write("other-cert.yaml", tls_secret("other", "default", OTHER_CERT,
                                                          OTHER_KEY))
                stack.write("named.yaml", NAMED)
            else:
                (stack.root / "named.yaml").unlink()
                (stack.root / "other-cert.yaml").unlink()
            await stack.applied(generation + 1)
            await eventually(lambda s=step: _expect(stack, inspected=s == "add"), within=20)
            # the old listener's drain (2 s) runs out under load
            await eventually(lambda n=served: _at_least(counts, "ok", n + 500), within=60)
            await asyncio.sleep(2.5)
        after = await admin.stats(address, "listener_manager.listener_modified")
    finally:
        stop.set()
        await asyncio.gather(*workers)
    print(f"\nHTTPS keep-alive load across two listener replacements: {dict(counts)}")
    assert [k for k in counts if k.startswith("failed")] == [], counts
    replaced = sum(after.values()) - sum(before.values())
    assert replaced >= 2, (before, after)  # the listener really was replaced twice
    assert counts["closed by the engine"] >= WORKERS  # … and its connections drained


async def _at_least(counts: Counter[str], key: str, n: int) -> bool:
    assert counts[key] >= n, counts
    return True


async def _expect(stack: Stack, *, inspected: bool) -> bool:
    assert await _inspected(stack) is inspected
    want = OTHER_CERT if inspected else GOOD_CERT
    assert await _served_certificate(stack.https_port, "other.example.com") \
        == ssl.PEM_cert_to_DER_cert(want)
    return True
