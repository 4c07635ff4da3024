"""Member health through a real Envoy: not-ready members never get traffic, however many."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve

from .harness import SHOP_INGRESS, Stack, get, service

pytestmark = pytest.mark.e2e

INGRESS = SHOP_INGRESS


def _slice(port: int, ready: str, not_ready: tuple[str, ...]) -> str:
    eps = [f"- addresses: [{ready}]\n  conditions: {{ready: true}}"]
    eps += [f"- addresses: [{a}]\n  conditions: {{ready: false}}" for a in not_ready]
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: p-tcp, port: {port}, protocol: TCP}}]
endpoints:
""" + "\n".join(eps) + "\n"


async def test_one_ready_member_among_not_ready_ones_gets_every_request(stack: Stack) -> None:
    """1 ready + 3 not-ready members (all answering): every request reaches the ready one."""
    port = await stack.start_echo("ready")
    not_ready = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    others = []
    for address in not_ready:  # they answer, so a request sent to one would show its name
        started = asyncio.Event()
        others.append(asyncio.create_task(serve(
            EchoOptions(address=address, port=port, identity=Identity(name="not-ready")),
            started=started)))
        await started.wait()
    try:
        stack.write("web.yaml", service("web", 80, port) + "---\n"
                    + _slice(port, "127.0.0.1", not_ready) + "---\n" + INGRESS)
        await stack.start()
        answers = [await get(stack.http_port, "shop.test", "/") for _ in range(40)]
        assert [(status, body.get("name")) for status, body in answers] == [(200, "ready")] * 40
    finally:
        for task in others:
            task.cancel()
        for task in others:
            with contextlib.suppress(asyncio.CancelledError):
                await task
