"""Live changes through a real Envoy: edits under load, EDS-only pushes, restarts, NACKs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest
import yaml

from podway.envoy.engine import admin

from .harness import Stack, endpoints, eventually, free_port, get, service

pytestmark = pytest.mark.e2e


def ingress(backend: str, path: str = "/") -> str:
    svc = f"{{service: {{name: {backend}, port: {{number: 80}}}}}}"
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: default}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - {{path: {path}, pathType: Prefix, backend: {svc}}}
"""


async def _two_backends(stack: Stack) -> dict[str, int]:
    ports = {}
    for name in ("blue", "green"):
        ports[name] = await stack.start_echo(name)
        stack.write(f"{name}.yaml", service(name, 80, ports[name]) + "---\n"
                    + endpoints(name, {"TCP": ports[name]}))
    return ports


@pytest.mark.parametrize("stack", ["delta", "sotw"], indirect=True)
async def test_edit_switches_routing_with_zero_failed_requests(stack: Stack) -> None:
    """Rewriting the Ingress moves traffic to the new backend while a request loop sees no
    failure (each step waits for events: answers seen, the edit applied — never for time)."""
    await _two_backends(stack)
    stack.write("ingress.yaml", ingress("blue"))
    await stack.start()
    failures: list[str] = []
    seen: list[str] = []
    answered = asyncio.Condition()
    stop = asyncio.Event()

    async def loop() -> None:
        for _ in range(5000):  # bounded
            if stop.is_set():
                return
            try:
                status, body = await get(stack.http_port, "shop.test", "/")
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                failures.append(repr(exc))
                continue
            if status != 200:
                failures.append(str(status))
            async with answered:
                seen.append(str(body.get("name")))
                answered.notify_all()

    async def answered_by(name: str, times: int) -> None:
        """Until the last ``times`` answers all came from ``name``."""
        async with asyncio.timeout(10), answered:
            await answered.wait_for(lambda: seen[-times:] == [name] * times)

    runner = asyncio.create_task(loop())
    try:
        await answered_by("blue", 5)
        for target in ("green", "blue", "green"):
            generation = stack.state.generation
            stack.write("ingress.yaml", ingress(target))
            await stack.applied(generation + 1)
            await answered_by(target, 5)
    finally:
        stop.set()
        await runner
    assert failures == []


@pytest.mark.parametrize("stack", ["delta", "sotw"], indirect=True)
async def test_endpoint_change_sends_only_eds(stack: Stack) -> None:
    """Moving a Service to another endpoint updates EDS only: LDS, RDS and CDS stay put."""
    ports = await _two_backends(stack)
    stack.write("ingress.yaml", ingress("blue"))
    await stack.start()
    address = await (await stack.engine()).wait_started()
    before = await admin.stats(address, "(lds|cds|rds|eds|update_success)")
    generation = stack.state.generation
    # blue's endpoint now points at green's echo server: same Service, new member.
    stack.write("blue.yaml", service("blue", 80, ports["blue"]) + "---\n"
                + endpoints("blue", {"TCP": ports["green"]}))
    await stack.applied(generation + 1)

    async def served_by_green() -> bool:
        _, body = await get(stack.http_port, "shop.test", "/")
        return body.get("name") == "green"

    await eventually(served_by_green)
    after = await admin.stats(address, "(lds|cds|rds|eds|update_success)")
    for name in ("listener_manager.lds.update_success", "cluster_manager.cds.update_success"):
        assert after[name] == before[name], name
    rds = [n for n in after if ".rds." in n and n.endswith("update_success")]
    assert rds
    assert all(after[n] == before[n] for n in rds)
    eds = "cluster.pool/default/blue/80.update_success"
    eds_keys = [n for n in after if n.startswith("cluster.") and n.endswith(".update_success")
                and "blue" in n]
    assert eds_keys, eds
    assert all(after[n] > before.get(n, 0) for n in eds_keys)


async def test_killed_envoy_is_restarted_and_serves_again(stack: Stack) -> None:
    """SIGKILL on Envoy: the engine starts a new one, which fetches its config and serves."""
    await _two_backends(stack)
    stack.write("ingress.yaml", ingress("blue"))
    await stack.start()
    engine = await stack.engine()
    old = engine.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)

    async def serving_again() -> bool:
        status, body = await get(stack.http_port, "shop.test", "/")
        return engine.pid != old and status == 200 and body.get("name") == "blue"

    await eventually(serving_again, within=10.0)
    assert engine.starts == 2


async def test_nacked_config_keeps_the_old_one_serving(stack: Stack) -> None:
    """A listener Envoy cannot bind is NACKed and lands on its Service (accepted: false) in the
    status file while the rest serves; deleting the Service clears the rejection."""
    await _two_backends(stack)
    stack.write("ingress.yaml", ingress("blue"))
    await stack.start()
    holder = socket.socket()
    holder.bind(("127.0.0.1", free_port()))
    holder.listen()
    taken = holder.getsockname()[1]
    listener = f"service/default/lb-blue/{taken}/tcp"
    try:
        stack.write("lb.yaml", service("blue", taken, 1, lb=True).replace("name: blue",
                                                                          "name: lb-blue"))
        async with asyncio.timeout(10):
            state = await stack.standalone.pipeline.wait_for(
                lambda s: any(r.resource == listener for r in s.rejections))
        rejection = next(r for r in state.rejections if r.resource == listener)
        assert "bind" in rejection.message or "Address" in rejection.message

        async def service_not_accepted() -> bool:
            status = yaml.safe_load((stack.root.parent / "status.yaml").read_text())
            entry = status["objects"].get("Service/default/lb-blue", {})
            return (entry.get("accepted") is False
                    and entry["engine_rejections"][0]["resource"] == listener
                    and status["objects"]["Ingress/default/web"]["accepted"] is True)

        await eventually(service_not_accepted, within=5.0)
        status, body = await get(stack.http_port, "shop.test", "/")
        assert (status, body.get("name")) == (200, "blue")
        (stack.root / "lb.yaml").unlink()
        async with asyncio.timeout(10):
            await stack.standalone.pipeline.wait_for(
                lambda s: s.generation > state.generation and not s.rejections)
    finally:
        holder.close()
