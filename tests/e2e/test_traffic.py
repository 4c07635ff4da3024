"""Health, balancing and persistence through a real Envoy, with echo backends on loopback.

Backends are several echo servers on one port at 127.0.0.1, .2, .3 (one EndpointSlice); which one
answered is in the JSON. Thresholds are proven by counting, not by the clock: the number of
failed checks a backend answered when Envoy took it out, the number of failed connects Envoy made
to a killed backend before and after ejecting it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from podway.envoy.engine import admin
from podway.tools.echo import Health, Identity
from podway.tools.echo.server import EchoOptions, serve

from .harness import SHOP_INGRESS, Stack, eventually, free_port, get, service

pytestmark = pytest.mark.e2e

ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
POOL = "pool/default/web/80"


@dataclass
class Backends:
    port: int
    health: dict[str, Health] = field(default_factory=dict)  # address → its /healthz state
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def name_of(self, address: str) -> str:
        return f"b{ADDRESSES.index(address) + 1}"


@pytest.fixture
async def backends() -> AsyncIterator[Backends]:
    out = Backends(free_port())
    try:
        for address in ADDRESSES:
            started = asyncio.Event()
            health = Health()
            out.health[address] = health
            out.tasks.append(asyncio.create_task(serve(
                EchoOptions(address=address, port=out.port, health=health,
                            identity=Identity(name=out.name_of(address))),
                started=started), name=f"echo-{address}"))
            await started.wait()
        yield out
    finally:
        for task in out.tasks:
            task.cancel()
        for task in out.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def slice_of(port: int, addresses: tuple[str, ...] = ADDRESSES) -> str:
    eps = "\n".join(f"- addresses: [{a}]\n  conditions: {{ready: true}}" for a in addresses)
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: p-tcp, port: {port}, protocol: TCP}}]
endpoints:
{eps}
"""


def policy(spec: str) -> str:
    return ("apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\n"
            "metadata: {name: web, namespace: default}\nspec:\n"
            "  targetRefs: [{group: '', kind: Service, name: web}]\n" + spec)


async def serve_web(stack: Stack, port: int, spec: str, *, svc: str | None = None,
                    addresses: tuple[str, ...] = ADDRESSES) -> None:
    stack.write("web.yaml", (svc or service("web", 80, port)) + "---\n" + slice_of(port, addresses)
                + "---\n" + SHOP_INGRESS + "---\n" + policy(spec))
    await stack.start()


async def request(port: int, *, headers: dict[str, str] | None = None,
                  source: str | None = None) -> tuple[int, dict[str, str], dict[str, object]]:
    """One request to shop.test: status, response headers (lower-case), the echo's JSON."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=(source, 0) if source else None)
        try:
            writer.write(f"GET / HTTP/1.1\r\nHost: shop.test\r\n{extra}"
                         "Connection: close\r\n\r\n".encode())
            data = await reader.read()
        finally:
            writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":")
                                                          for line in lines[1:])}
    with contextlib.suppress(ValueError):
        return int(lines[0].split(" ")[1]), found, json.loads(body)
    return int(lines[0].split(" ")[1]), found, {}


async def names(port: int, count: int, **kwargs: object) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        status, _, body = await request(port, **kwargs)  # type: ignore[arg-type]
        out[str(body.get("name")) if status == 200 else f"status-{status}"] += 1
    return out


async def host_flags(stack: Stack, pool: str = POOL) -> dict[str, str]:
    """address → the engine's health of that member of ``pool`` (Envoy's health flags;
    HAProxy's engine-neutral health)."""
    if stack.haproxy:
        assert stack.standalone.haproxy is not None
        view = await stack.standalone.haproxy.health() or {}
        return {host.rsplit(":", 1)[0]: state.health.value for (name, host), state in view.items()
                if name == pool}
    address = await (await stack.engine()).wait_started()
    _, body = await admin.request(address, "/clusters")
    out = {}
    for line in body.splitlines():
        match = re.match(rf"^{re.escape(pool)}::([0-9.]+):\d+::health_flags::(.*)$", line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


async def test_unhealthy_member_is_removed_after_its_threshold_and_restored(
        stack: Stack, backends: Backends) -> None:
    """An HTTP check (unhealthyThreshold 2): a backend whose /healthz fails is taken out after
    2 failed checks (3 at most, for the polling), gets no request while out, and gets requests
    again after its next passing check(s) (healthyThreshold 1)."""
    await serve_web(stack, backends.port, """  healthCheck:
    type: HTTP
    path: /healthz
    interval: 1s
    timeout: 500ms
    unhealthyThreshold: 2
    healthyThreshold: 1
  outlierDetection: {enabled: false}
""")
    await eventually(lambda: _all_answer(stack), within=15)
    sick = backends.health["127.0.0.2"]
    sick.healthy = False
    await eventually(lambda: _flagged(stack, "127.0.0.2", "failed_active_hc"), within=20)
    assert 2 <= sick.failed <= 3, f"taken out after {sick.failed} failed checks"
    served = await names(stack.http_port, 30)
    assert served == {"b1": 15, "b3": 15}, served
    checks_before = sick.checks
    sick.healthy = True
    await eventually(lambda: _all_answer(stack), within=20)
    passed = sick.checks - checks_before
    # healthyThreshold 1; Envoy may apply the transition one check later on a loaded machine.
    assert 1 <= passed <= 3, f"back after {passed} passing checks"
    served = await names(stack.http_port, 30)
    assert served == {"b1": 10, "b2": 10, "b3": 10}, served


async def _all_answer(stack: Stack) -> bool:
    return set(await names(stack.http_port, 6)) == {"b1", "b2", "b3"}


async def test_member_killed_under_load_is_ejected_after_its_consecutive_errors(
        stack: Stack, backends: Backends) -> None:
    """A backend process killed (SIGKILL) under load: outlier detection (3 consecutive errors)
    ejects it after its 3rd consecutive error — nothing is sent to it afterwards — and the
    requests that failed are counted, printed and all explained by the killed member's errors
    (most connect failures are retried on another member, so clients see few)."""
    victim_port = backends.port
    # The victim is a separate process at 127.0.0.3 (a real kill closes every socket at once);
    # the in-process echo at .3 is stopped first.
    backends.tasks[2].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await backends.tasks[2]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "echo", "--address", "127.0.0.3", "--port",
        str(victim_port), "--name", "b3", "--log-level", "error")
    try:
        await eventually(lambda: _listening("127.0.0.3", victim_port), within=20)
        await serve_web(stack, backends.port, """  healthCheck: {enabled: false}
  outlierDetection: {consecutiveErrors: 3, baseEjectionTime: 5m, interval: 1s}
""")
        await eventually(lambda: _all_answer(stack), within=15)
        results: collections.Counter[str] = collections.Counter()
        stop, enough = asyncio.Event(), asyncio.Event()
        target = [sys.maxsize]

        async def load() -> None:
            while not stop.is_set():
                try:
                    status, _, body = await request(stack.http_port)
                    results[str(body.get("name")) if status == 200 else f"failed-{status}"] += 1
                except (OSError, TimeoutError):
                    results["failed-connection"] += 1
                if sum(results.values()) >= target[0]:
                    enough.set()

        workers = [asyncio.create_task(load()) for _ in range(4)]
        try:
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            address = await (await stack.engine()).wait_started()
            prefix = f"cluster.{POOL}."
            await eventually(lambda: _ejected(address, prefix), within=20)
            at_ejection = await victim_errors(stack)
            target[0] = sum(results.values()) + 100
            async with asyncio.timeout(30):
                await enough.wait()  # 100 more requests after the ejection
        finally:
            stop.set()
            await asyncio.gather(*workers)
        failed = sum(n for k, n in results.items() if k.startswith("failed"))
        print(f"\nkilled member: requests {sum(results.values())}, failed {failed}, errors on "
              f"the killed member when ejected {at_ejection} (connect failures, failed requests)")
        # Ejected on its 3rd consecutive error. Requests already under way then may add to the
        # count: each worker's request in flight, one on a stale pooled connection, and those
        # routed while the ejection (decided on Envoy's main thread) reaches the worker thread.
        errors = max(at_ejection)  # a failed connect fails its request too: counted in both
        assert 3 <= errors <= 3 + 4 * len(workers), at_ejection
        # ... and after that nothing more was sent to it.
        assert await victim_errors(stack) == at_ejection
        # Every failed request is one of the killed member's errors (the healthy ones fail
        # nothing): those already sent to it (not retried by default) and connect failures whose
        # retry the pool's retry cap refused; the others were retried on a healthy member.
        assert failed <= errors, (results, at_ejection)
        assert results["b1"], results
        assert results["b2"], results
        flags = await host_flags(stack)
        assert "failed_outlier_check" in flags["127.0.0.3"], flags
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _flagged(stack: Stack, member: str, flag: str) -> bool:
    return flag in (await host_flags(stack)).get(member, "")


async def _ejected(address: str, prefix: str) -> bool:
    found = await admin.stats(address, re.escape(prefix))
    return bool(found.get(prefix + "outlier_detection.ejections_enforced_total", 0))


async def victim_errors(stack: Stack) -> tuple[int, int]:
    """(failed connects, failed requests) Envoy counted on the member at 127.0.0.3."""
    address = await (await stack.engine()).wait_started()
    _, body = await admin.request(address, "/clusters")
    found = dict(re.findall(rf"^{re.escape(POOL)}::127\.0\.0\.3:\d+::(\w+)::(\d+)$", body,
                            re.MULTILINE))
    return int(found.get("cx_connect_fail", 0)), int(found.get("rq_error", 0))


async def _listening(address: str, port: int) -> bool:
    _, writer = await asyncio.open_connection(address, port)
    writer.close()
    return True


@pytest.mark.parametrize("algorithm", ["RoundRobin", "LeastRequest", "Random"])
async def test_distribution_per_algorithm_is_even_within_bounds(
        engine_stack: Stack, backends: Backends, algorithm: str) -> None:
    """300 sequential requests over 3 members: round robin gives exactly 100 each; least
    request and random stay within 5 standard deviations of 100 (binomial, p = 1/3)."""
    await serve_web(engine_stack, backends.port, f"  loadBalancer: {{type: {algorithm}}}\n")
    await eventually(lambda: _all_answer(engine_stack), within=15)
    served = await names(engine_stack.http_port, 300)
    assert set(served) == {"b1", "b2", "b3"}, served
    if algorithm == "RoundRobin":
        assert sorted(served.values()) == [100, 100, 100], served
    else:
        assert all(59 <= n <= 141 for n in served.values()), served  # 100 ± 5 x 8.2


@pytest.mark.parametrize("algorithm", ["RingHash", "Maglev"])
async def test_consistent_hashing_on_a_header_is_even_and_sticky(
        engine_stack: Stack, backends: Backends, algorithm: str) -> None:
    """Hashing on x-user: 150 users spread over the 3 members (each gets 20-80 of them), and
    every user lands on the same member each time."""
    await serve_web(engine_stack, backends.port, f"""  loadBalancer:
    type: {algorithm}
    hashOn: {{type: Header, name: x-user}}
""")
    await eventually(lambda: _all_answer_hashed(engine_stack), within=15)
    first = {}
    for user in range(150):
        _, _, body = await request(engine_stack.http_port, headers={"x-user": f"u{user}"})
        first[user] = body.get("name")
    spread = collections.Counter(first.values())
    assert set(spread) == {"b1", "b2", "b3"}, spread
    assert all(20 <= n <= 80 for n in spread.values()), spread
    for user in range(0, 150, 10):
        _, _, body = await request(engine_stack.http_port, headers={"x-user": f"u{user}"})
        assert body.get("name") == first[user]


async def _all_answer_hashed(stack: Stack) -> bool:
    seen = set()
    for user in range(30):
        _, _, body = await request(stack.http_port, headers={"x-user": f"probe{user}"})
        seen.add(body.get("name"))
    return seen == {"b1", "b2", "b3"}


async def test_cookie_persistence_holds_across_100_requests_and_a_member_change(
        engine_stack: Stack, backends: Backends) -> None:
    """The first answer sets the podway-session cookie (Max-Age from the ttl, Path /); 100
    requests with it all reach the same member. Of 60 sessions, those whose member stays keep it
    when another member is removed (at least 90 %: Maglev moves almost only the keys of the
    member that left)."""
    await serve_web(engine_stack, backends.port, "  persistence: {type: Cookie, ttl: 1h}\n")
    await eventually(lambda: _get_ok(engine_stack), within=15)
    status, headers, body = await request(engine_stack.http_port)
    assert status == 200
    cookie = headers.get("set-cookie", "")
    assert cookie.startswith("podway-session="), headers
    assert "Max-Age=3600" in cookie
    assert "Path=/" in cookie
    jar = {"cookie": cookie.split(";", 1)[0]}
    assert await names(engine_stack.http_port, 100, headers=jar) == {body.get("name"): 100}
    before = {}
    for i in range(60):
        _, _, answer = await request(engine_stack.http_port,
                                     headers={"cookie": f"podway-session=s{i}"})
        before[i] = answer.get("name")
    assert set(before.values()) == {"b1", "b2", "b3"}, before
    gone = ADDRESSES[0]
    generation = engine_stack.state.generation
    engine_stack.write("web.yaml", service("web", 80, backends.port) + "---\n"
                + slice_of(backends.port, ADDRESSES[1:]) + "---\n" + SHOP_INGRESS + "---\n"
                + policy("  persistence: {type: Cookie, ttl: 1h}\n"))
    await engine_stack.applied(generation + 1)
    await eventually(lambda: _gone(engine_stack, gone), within=10)
    kept = moved = 0
    for i, name in before.items():
        _, _, answer = await request(engine_stack.http_port,
                                     headers={"cookie": f"podway-session=s{i}"})
        assert answer.get("name") != backends.name_of(gone)
        if name != backends.name_of(gone):
            kept, moved = (kept + 1, moved) if answer.get("name") == name else (kept, moved + 1)
    assert kept >= 0.9 * (kept + moved), (kept, moved)


async def _get_ok(stack: Stack) -> bool:
    status, _ = await get(stack.http_port, "shop.test")
    return status == 200


async def _gone(stack: Stack, address: str) -> bool:
    return address not in await host_flags(stack)


async def _all_healthy(stack: Stack, pool: str = POOL) -> bool:
    return await host_flags(stack, pool) == dict.fromkeys(ADDRESSES, "healthy")


async def test_client_ip_persistence_from_service_session_affinity(
        engine_stack: Stack, backends: Backends) -> None:
    """Service sessionAffinity: ClientIP: each of 12 client addresses sticks to one member over
    15 requests, and the 12 do not all land on the same member. The probes start once every
    member passed its first check: before, the engine sends everything to those that did."""
    svc = service("web", 80, backends.port).replace(
        "  type: ClusterIP\n", "  type: ClusterIP\n  sessionAffinity: ClientIP\n")
    await serve_web(engine_stack, backends.port, "  outlierDetection: {enabled: true}\n", svc=svc)
    await eventually(lambda: _get_ok(engine_stack), within=15)
    await eventually(lambda: _all_healthy(engine_stack), within=15)
    landed = {}
    for i in range(12):
        source = f"127.0.0.{20 + i}"
        served = await names(engine_stack.http_port, 15, source=source)
        assert len(served) == 1, (source, served)
        landed[source] = next(iter(served))
    assert len(set(landed.values())) > 1, landed


async def test_client_ip_persistence_of_a_load_balancer_service(engine_stack: Stack) -> None:
    """A TCP LoadBalancer Service with sessionAffinity ClientIP: each of 12 client addresses
    reaches the same member on each of 10 connections, and not all reach the same one (probed
    once every member passed its first check)."""
    port = free_port()
    tasks = []
    for address in ADDRESSES:
        started = asyncio.Event()
        tasks.append(asyncio.create_task(serve(EchoOptions(
            address=address, port=port, tcp=True,
            identity=Identity(name=f"t{ADDRESSES.index(address) + 1}")), started=started)))
        await started.wait()
    try:
        lb_port = free_port()
        svc = service("web", lb_port, port, lb=True).replace(
            "  type: LoadBalancer\n", "  type: LoadBalancer\n  sessionAffinity: ClientIP\n")
        engine_stack.write("web.yaml", svc + "---\n" + slice_of(port))
        await engine_stack.start()
        await eventually(lambda: _whoami(lb_port, "127.0.0.20"), within=15)
        await eventually(lambda: _all_healthy(engine_stack, f"pool/default/web/{lb_port}/tcp"),
                         within=15)
        landed = {}
        for i in range(12):
            source = f"127.0.0.{20 + i}"
            seen = {await _whoami(lb_port, source) for _ in range(10)}
            assert len(seen) == 1, (source, seen)
            landed[source] = seen.pop()
        assert len(set(landed.values())) > 1, landed
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _whoami(port: int, source: str) -> str:
    """The name of the TCP echo a new connection from ``source`` reaches."""
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(source, 0))
        try:
            writer.write(b"whoami")
            await writer.drain()
            data = await reader.readline()
        finally:
            writer.close()
    return str(json.loads(data)["name"])
