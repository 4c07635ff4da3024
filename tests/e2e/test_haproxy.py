"""The HAProxy engine end to end: real haproxy on loopback, members and routes edited under load.

The routing semantics themselves (hosts, paths, headers, splits, rewrites, redirects, SNI) run on
both engines in ``test_routing.py`` and ``test_gateway_http.py`` (the ``engine_stack`` fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import ssl
import stat
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from podway.engines.member_health import Health
from podway.haproxy.process import HAProxyEngine
from podway.tools.echo import Health as EchoHealth
from tests.waiting import eventually

from .harness import (
    SHOP_INGRESS,
    Load,
    Stack,
    endpoints,
    free_port,
    get,
    make_stack,
    service,
)

pytestmark = pytest.mark.e2e

POOL = "pool/default/web/80"


@pytest.fixture
async def hstack(tmp_path: Path) -> AsyncIterator[Stack]:
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, engine_kind="haproxy")
    try:
        yield made
    finally:
        await made.stop()


def _slice(i: int, port: int) -> str:
    return endpoints("web", {"TCP": port}, slice_name=f"web-{i}")


async def _members(stack: Stack, ports: set[int]) -> None:
    """Until HAProxy serves exactly these members of the web pool."""
    async with asyncio.timeout(10):
        while True:
            state = stack.standalone.pipeline.state
            pool = state.ir.pools.get(POOL) if state else None
            if state and pool and {m.port for m in pool.members} == ports:
                await stack.served(state.generation)
                return
            await asyncio.sleep(0.02)


async def _counted(engine: HAProxyEngine, port: int, health: Health) -> None:
    """Until HAProxy counts the web pool's member on ``port`` so: HEALTHY (its first check
    passed), UNHEALTHY (checked and down)."""
    async def counted() -> bool:
        view = await engine.health()
        state = view.get((POOL, f"127.0.0.1:{port}")) if view else None
        return state is not None and state.health is health
    await eventually(counted, within=10, every=0.05)


async def test_member_changes_apply_without_reload_and_lose_no_request(hstack: Stack) -> None:
    """Members come and go through the runtime API (no reload) while requests flow: none fails
    and every member in turn answers. An added member takes requests once its first check
    passed (checked every second here, so it comes within one); until then the members it
    replaces are held."""
    ports = {name: await hstack.start_echo(name) for name in ("web-a", "web-b", "web-c")}
    hstack.write("svc.yaml", service("web", 80, ports["web-a"], annotations={
        "podway.io/health-check-interval": "1s"}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    hstack.write("slice-web-a.yaml", _slice(0, ports["web-a"]))
    await hstack.start()
    engine = hstack.standalone.haproxy
    assert engine is not None
    reloads = engine.counters.reloads
    load = Load(hstack.http_port, "shop.test")
    steps = [("web-b", True), ("web-a", False), ("web-c", True), ("web-b", False),
             ("web-a", True), ("web-c", False)] * 2
    try:
        for i, (name, add) in enumerate(steps):
            if add:
                hstack.write(f"slice-{name}.yaml", _slice(i + 1, ports[name]))
            else:
                (hstack.root / f"slice-{name}.yaml").unlink()
            await _members(hstack, {ports[n] for n in ports
                                    if (hstack.root / f"slice-{n}.yaml").exists()})
            if add:
                await _counted(engine, ports[name], Health.HEALTHY)
            await asyncio.sleep(0.2)
    finally:
        await load.stop()
    assert load.failed == []
    assert load.ok > 50
    assert load.seen == {"web-a", "web-b", "web-c"}
    assert engine.counters.reloads == reloads  # every change went through the runtime API
    assert engine.counters.server_edits >= 6


async def test_structural_changes_reload_seamlessly_under_load(hstack: Stack) -> None:
    """A backend that comes and goes needs a reload; requests to the other host never fail."""
    web = await hstack.start_echo("web")
    api = await hstack.start_echo("api")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("api.yaml", service("api", 80, api) + "---\n" + endpoints("api", {"TCP": api}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    await hstack.start()
    engine = hstack.standalone.haproxy
    assert engine is not None
    reloads = engine.counters.reloads
    extra = SHOP_INGRESS.replace("metadata: {name: web,", "metadata: {name: extra,") \
        .replace("shop.test", "api.test").replace("{name: web, port", "{name: api, port")
    load = Load(hstack.http_port, "shop.test")
    try:
        for _ in range(5):
            hstack.write("extra.yaml", extra)
            await _until(hstack, lambda ir: "pool/default/api/80" in ir.pools)
            assert (await get(hstack.http_port, "api.test", "/"))[1].get("name") == "api"
            (hstack.root / "extra.yaml").unlink()
            await _until(hstack, lambda ir: "pool/default/api/80" not in ir.pools)
            assert (await get(hstack.http_port, "api.test", "/"))[0] == 404
    finally:
        await load.stop()
    assert load.failed == []
    assert load.ok > 20
    assert engine.counters.reloads >= reloads + 10



async def test_a_reload_does_not_count_a_failing_member_up(hstack: Stack) -> None:
    """A member down in the running HAProxy (it answers requests but fails its check) stays
    out across a reload (a new host and backend): the new worker would count it up until a
    check fails (three quick checks), so it starts at weight 0 and is marked down. Before,
    it took about half of the requests for those seconds."""
    good = await hstack.start_echo("web-a")
    bad = await hstack.start_echo("web-b", health=EchoHealth(healthy=False))
    api = await hstack.start_echo("api")
    hstack.write("svc.yaml", service("web", 80, good, annotations={
        "podway.io/health-check-path": "/healthz", "podway.io/health-check-interval": "1s"})
        + "---\n" + endpoints("web", {"TCP": good}) + "---\n"
        + endpoints("web", {"TCP": bad}, slice_name="web-2"))
    hstack.write("api.yaml", service("api", 80, api) + "---\n" + endpoints("api", {"TCP": api}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    await hstack.start()
    engine = hstack.standalone.haproxy
    assert engine is not None
    await _counted(engine, good, Health.HEALTHY)
    await _counted(engine, bad, Health.UNHEALTHY)
    reloads = engine.counters.reloads
    load = Load(hstack.http_port, "shop.test")
    try:
        extra = SHOP_INGRESS.replace("metadata: {name: web,", "metadata: {name: extra,") \
            .replace("shop.test", "api.test").replace("{name: web, port", "{name: api, port")
        hstack.write("extra.yaml", extra)
        await _until(hstack, lambda ir: "pool/default/api/80" in ir.pools)
        assert engine.counters.reloads == reloads + 1
        ok = load.ok
        await eventually(lambda: load.ok >= ok + 200, within=20)
    finally:
        await load.stop()
    assert load.failed == []
    assert load.seen == {"web-a"}
    await _counted(engine, bad, Health.UNHEALTHY)  # marked down again, not counted up

async def _until(stack: Stack, holds: object) -> None:
    async with asyncio.timeout(10):
        while True:
            state = stack.standalone.pipeline.state
            if state is not None and holds(state.ir):  # type: ignore[operator]
                await stack.served(state.generation)
                return
            await asyncio.sleep(0.02)


async def test_tcp_listener_and_private_runtime_socket(tmp_path: Path, short_dir: Path) -> None:
    """A LoadBalancer Service's TCP port is served; the runtime sockets are the owner's only;
    a clean stop leaves nothing in a lasting state folder."""

    root = tmp_path / "manifests"
    root.mkdir()
    hstack = await make_stack(root, engine_kind="haproxy", state_dir=short_dir / "st")
    try:
        await _tcp_and_sockets(hstack)
    finally:
        await hstack.stop()


async def _tcp_and_sockets(hstack: Stack) -> None:

    backend = await hstack.start_echo("l4", tcp=True)
    lb_port = free_port()
    hstack.write("l4.yaml", service("l4", lb_port, backend, lb=True)
                 + "---\n" + endpoints("l4", {"TCP": backend}))
    await hstack.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", lb_port)
    try:
        writer.write(b"hello over tcp\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"hello over tcp\n"
    finally:
        writer.close()
    engine = hstack.standalone.haproxy
    assert engine is not None
    for sock in (engine.runtime_socket, engine.master_socket):
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(engine.folder).st_mode) == 0o700
    assert engine.config_path.exists()
    await hstack.stop()
    assert not engine.folder.exists()  # config, keys, maps and sockets gone after a clean stop


async def _checked_pair(stack: Stack, first: int, second: int, *, interval: str
                        ) -> HAProxyEngine:
    """The web pool with members on ports ``first`` and ``second``, TCP-checked every
    ``interval`` and down after one failure, served; its HAProxy engine."""
    stack.write("svc.yaml", f"""apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations:
    podway.io/health-check: tcp
    podway.io/health-check-interval: {interval}
    podway.io/unhealthy-threshold: "1"
spec:
  selector: {{app: web}}
  ports: [{{name: p-tcp, port: 80, targetPort: {first}, protocol: TCP}}]
""")
    stack.write("first.yaml", _slice(1, first))
    stack.write("second.yaml", _slice(2, second))
    stack.write("ingress.yaml", SHOP_INGRESS)
    await stack.start()
    engine = stack.standalone.haproxy
    assert engine is not None
    return engine


async def test_member_health_is_reported_in_the_engine_neutral_form(hstack: Stack) -> None:
    """A live member is healthy, a dead one unhealthy with the Envoy engine's reason, keyed by
    (pool, address:port), and the view encodes as a member health report."""
    from podway.engines.member_health import Health, Message, decode, encode


    live = await hstack.start_echo("web")
    dead = free_port()  # nothing listens there
    engine = await _checked_pair(hstack, live, dead, interval="100ms")
    want = {(POOL, f"127.0.0.1:{live}"): Health.HEALTHY,
            (POOL, f"127.0.0.1:{dead}"): Health.UNHEALTHY}
    async with asyncio.timeout(10):
        while True:
            view = await engine.health()
            if view is not None and {k: s.health for k, s in view.items()} == want:
                break
            await asyncio.sleep(0.1)
    assert view[(POOL, f"127.0.0.1:{dead}")].reason == "failed active health check"
    message = decode(encode(Message(node="edge-1", full=True, hosts=view)))
    assert message.hosts == view
    # The same view is what explain and the dashboard of this Podway show (no Envoy here).
    views = await hstack.standalone.engine_views()
    assert {k: s.health for k, s in views["haproxy"].items()} == want


async def test_a_down_member_is_checked_again_within_a_second_not_a_whole_interval(
        hstack: Stack) -> None:
    """A member down (nothing listened on its port) is checked again after the short interval
    (``fastinter``/``downinter``, at most 1 s, as the Envoy engine's ``unhealthy_interval``),
    not the pool's 6 s one: once its server listens it is healthy again within ~1 s, where a
    whole interval would take ~6 s."""
    from podway.engines.member_health import Health


    live, late = await hstack.start_echo("web"), free_port()
    engine = await _checked_pair(hstack, live, late, interval="6s")

    async def health() -> Health | None:
        view = await engine.health()
        state = view.get((POOL, f"127.0.0.1:{late}")) if view is not None else None
        return state.health if state is not None else None

    # The first checks are spread over the 6 s interval.
    await eventually(lambda: _is(health(), Health.UNHEALTHY), within=20, every=0.05)
    await hstack.start_echo("late", port=late)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await eventually(lambda: _is(health(), Health.HEALTHY), within=10, every=0.05)
    assert loop.time() - began < 3.5


async def _is(value: Awaitable[object], wanted: object) -> bool:
    return await value is wanted


async def test_a_restarted_podway_takes_over_from_the_haproxy_left_running(
        short_dir: Path) -> None:
    """A Podway that died leaves its HAProxy serving; the next one on the same folder starts
    its own, then stops the old one gracefully: no request fails, the old master exits."""
    from podway.haproxy.process import HAProxyEngine, HAProxyOptions
    from podway.model import Snapshot
    from podway.model.loader import load_text
    from podway.translate import TranslateOptions, translate

    from .harness import echo_backend

    port, echo = await echo_backend("web")
    http = free_port()
    text = service("web", 80, port) + "---\n" + endpoints("web", {"TCP": port}) + "---\n" \
        + SHOP_INGRESS
    ir = translate(Snapshot.of_objects(load_text(text, source="t").objects),
                   TranslateOptions(address="127.0.0.1", http_port=http,
                                    https_port=free_port())).ir
    folder = short_dir / "hx"
    first = HAProxyEngine(HAProxyOptions(folder=folder))
    assert await first.apply(ir) == "start"
    left = int(first.pid_file.read_text().split()[0])
    load = Load(http, "shop.test")
    second = HAProxyEngine(HAProxyOptions(folder=folder))  # `first` is abandoned, as by a crash
    running = asyncio.create_task(second.run())
    try:
        await asyncio.sleep(0.3)
        assert await second.apply(ir) == "start"
        async with asyncio.timeout(10):
            while Path(f"/proc/{left}").exists():  # noqa: ASYNC110 (another process)
                await asyncio.sleep(0.05)
        after = load.ok + len(load.failed)  # ten more requests once the old HAProxy is gone
        async with asyncio.timeout(10):  # (a count, not a fixed time: loaded machines)
            while load.ok + len(load.failed) < after + 10:  # noqa: ASYNC110 (the load's)
                await asyncio.sleep(0.05)
    finally:
        await load.stop()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo
        if Path(f"/proc/{left}").exists():  # the test failed: end what it started
            os.kill(left, signal.SIGTERM)
    assert second.counters.took_over == 1
    assert load.failed == []
    assert load.ok > 10


async def test_certificate_rotation_under_https_load(hstack: Stack) -> None:
    """A renewed certificate is served after each rotation (a seamless reload); HTTPS
    requests meanwhile never fail."""
    import trustme

    from tests.certs import tls_secret

    ca = trustme.CA()
    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))

    def secret() -> str:
        cert = ca.issue_cert("shop.test")
        return tls_secret("shop-tls", "default", cert.cert_chain_pems[0].bytes().decode(),
                          cert.private_key_pem.bytes().decode())

    hstack.write("secret.yaml", secret())
    hstack.write("ingress.yaml", SHOP_INGRESS.replace(
        "  rules:", "  tls:\n  - {hosts: [shop.test], secretName: shop-tls}\n  rules:"))
    await hstack.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    engine = hstack.standalone.haproxy
    assert engine is not None

    async def serial() -> int:
        _, writer = await asyncio.open_connection("127.0.0.1", hstack.https_port, ssl=context,
                                                  server_hostname="shop.test")
        try:
            return int(writer.get_extra_info("peercert")["serialNumber"], 16)
        finally:
            writer.close()

    seen = {await serial()}
    reloads = engine.counters.reloads
    load = Load(hstack.https_port, "shop.test", tls=context)
    try:
        for _ in range(4):
            hstack.write("secret.yaml", secret())
            async with asyncio.timeout(10):
                while (now := await serial()) in seen:  # noqa: ASYNC110 (HAProxy's answer)
                    await asyncio.sleep(0.05)
            seen.add(now)
            await asyncio.sleep(0.2)
    finally:
        await load.stop()
    assert load.failed == []
    assert load.ok > 10
    assert len(seen) == 5
    assert engine.counters.reloads >= reloads + 4


async def test_what_haproxy_cannot_serve_is_a_condition_in_the_status(hstack: Stack) -> None:
    """A UDP port (HAProxy has no UDP) shows as an UnsupportedValue error on its Service in
    the status file, once HAProxy serves that generation; the TCP port beside it is served."""
    import yaml

    from .harness import free_port_both

    backend = await hstack.start_echo("l4", tcp=True, udp=True)
    lb_port = free_port_both()
    hstack.write("l4.yaml", service("l4", lb_port, backend, lb=True, protocols=("TCP", "UDP"))
                 + "---\n" + endpoints("l4", {"TCP": backend, "UDP": backend}))
    await hstack.start()
    data = yaml.safe_load((hstack.root.parent / "status.yaml").read_text())
    problems = data["objects"]["Service/default/l4"]["problems"]
    assert any("UnsupportedValue" in str(p) and "UDP" in str(p) for p in problems), problems
    reader, writer = await asyncio.open_connection("127.0.0.1", lb_port)
    try:
        writer.write(b"tcp still works\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"tcp still works\n"
    finally:
        writer.close()


async def test_client_address_headers_are_the_peers(hstack: Stack) -> None:
    """Without --x-real-ip no X-Real-IP reaches the pod (a client's own is dropped);
    X-Forwarded-For gets the peer appended; X-Forwarded-Proto says http. (With the flag, X-Real-IP
    is the peer: tests/e2e/test_client_ip.py runs that on both engines.)"""
    from .gateway_helpers import request

    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    await hstack.start()
    status, _, body = await request(hstack.http_port, "shop.test", headers={
        "X-Real-IP": "6.6.6.6", "X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https"})
    headers = body["headers"]
    assert isinstance(headers, dict)
    assert status == 200
    assert "x-real-ip" not in headers
    assert headers["x-forwarded-proto"] == "http"
    assert str(headers["x-forwarded-for"]).replace(" ", "").endswith("6.6.6.6,127.0.0.1")


async def test_a_plain_route_is_added_by_a_map_swap_without_reload(hstack: Stack) -> None:
    """A new host and path to an existing pool change maps only: swapped at runtime (no
    reload), served at once, and requests to the other host meanwhile never fail. Only the
    first path that needs the base map's "?" end mark (hosts whose routes were all "/" did
    not look it up) changes the rules: one reload, as hitless."""
    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    await hstack.start()
    engine = hstack.standalone.haproxy
    assert engine is not None
    reloads = engine.counters.reloads
    load = Load(hstack.http_port, "shop.test")
    try:
        for i in range(6):
            hstack.write("more.yaml", SHOP_INGRESS.replace("metadata: {name: web,",
                                                           "metadata: {name: more,")
                         .replace("shop.test", f"more-{i}.test")
                         .replace("path: /,", "path: /only,"))
            await _until(hstack, lambda ir, i=i: any(
                v.hostname == f"more-{i}.test" for ls in ir.listeners for v in ls.virtual_hosts))
            assert (await get(hstack.http_port, f"more-{i}.test", "/only/x"))[0] == 200
            assert (await get(hstack.http_port, f"more-{i}.test", "/"))[0] == 404
            if i == 0:  # the end mark's first row
                assert engine.counters.reloads == reloads + 1
                reloads, swaps = engine.counters.reloads, engine.counters.map_swaps
    finally:
        await load.stop()
    assert load.failed == []
    assert engine.counters.reloads == reloads
    assert engine.counters.map_swaps >= swaps + 5


async def test_tls_passthrough_by_sni(hstack: Stack) -> None:
    """TLSRoutes pick the backend by SNI without decrypting: the certificate the client sees
    is each backend's own."""
    import trustme

    from .gateway_helpers import CLASS, gateway, route, tls_backend

    ca = trustme.CA()
    for name in ("alpha", "beta"):
        await tls_backend(hstack, ca, f"{name}.tls.test")
    tls_port = free_port()
    hstack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: tls, protocol: TLS, port: {tls_port}, tls: {{mode: Passthrough}}}}\n"))
    hstack.write("routes.yaml", "---\n".join(route(name, f"""  parentRefs: [{{name: gw}}]
  hostnames: [{name}.tls.test]
  rules: [{{backendRefs: [{{name: {name}, port: 443}}]}}]
""", kind="TLSRoute", version="v1alpha2") for name in ("alpha", "beta")))
    await hstack.start()
    for host in ("alpha.tls.test", "beta.tls.test"):
        context = ssl.create_default_context()
        ca.configure_trust(context)
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", tls_port, ssl=context,
                                                           server_hostname=host)
            try:
                writer.write(b"hello\n")
                assert await reader.readline() == f"{host}\n".encode()
                peer = writer.get_extra_info("peercert")
                assert any(v == host for _, v in peer["subjectAltName"])
            finally:
                writer.close()


async def test_config_dump_shows_the_served_haproxy_cfg_and_its_maps(
        tmp_path: Path, short_dir: Path) -> None:
    """``/config`` (``podway config dump``) of a running HAProxy engine carries the haproxy.cfg
    it serves and its maps, and no certificate's private key."""
    from podway.readers.admin_api import SOCKET_NAME, get_json

    root = tmp_path / "manifests"
    root.mkdir()
    stack = await make_stack(root, engine_kind="haproxy", state_dir=short_dir / "st")
    try:
        port = await stack.start_echo("web")
        stack.write("web.yaml", service("web", 80, port) + "---\n" + _slice(1, port))
        stack.write("ingress.yaml", SHOP_INGRESS)
        await stack.start()
        engine = stack.standalone.haproxy
        assert engine is not None
        assert engine.rendered is not None  # start() returns once HAProxy serves
        data = await get_json(short_dir / "st" / SOCKET_NAME, "/config")
        assert data["haproxy"]["config"] == engine.rendered.config
        assert "frontend " in data["haproxy"]["config"]
        hosts = [text for path, text in data["haproxy"]["maps"].items()
                 if path.endswith(".hosts.map")]
        assert any(text.startswith("shop.test ") for text in hosts), data["haproxy"]["maps"]
        assert "PRIVATE KEY" not in str(data)
    finally:
        await stack.stop()


async def test_idle_server_connections_are_shared_by_new_client_connections(
        hstack: Stack) -> None:
    """As Envoy's upstream pool does, a new client connection's request goes over an idle
    connection to the member (``http-reuse always``): the member sees one connection, from one
    source port, for requests that came on three client connections one after the other."""
    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("ingress.yaml", SHOP_INGRESS)
    await hstack.start()
    seen = set()
    for _ in range(3):
        status, body = await get(hstack.http_port, "shop.test")  # its own client connection
        assert status == 200
        seen.add(body["client"])
    assert len(seen) == 1, seen


async def test_tls13_prefers_aes128_and_still_takes_every_suite_it_took(hstack: Stack) -> None:
    """HAProxy picks TLS_AES_128_GCM_SHA256 for a client offering OpenSSL's default list
    (cheaper handshakes; OpenSSL's own order picks AES-256), and a client offering only one of
    the three TLS 1.3 suites OpenSSL enables by default still gets it: nothing was removed."""
    import trustme

    from tests.certs import tls_secret

    cert = trustme.CA().issue_cert("shop.test")
    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("secret.yaml", tls_secret("shop-tls", "default",
                                           cert.cert_chain_pems[0].bytes().decode(),
                                           cert.private_key_pem.bytes().decode()))
    hstack.write("ingress.yaml", SHOP_INGRESS.replace(
        "  rules:", "  tls:\n  - {hosts: [shop.test], secretName: shop-tls}\n  rules:"))
    await hstack.start()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", hstack.https_port, ssl=context,
                                              server_hostname="shop.test")
    try:
        assert writer.get_extra_info("cipher")[:2] == ("TLS_AES_128_GCM_SHA256", "TLSv1.3")
    finally:
        writer.close()
    for suite in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                  "TLS_CHACHA20_POLY1305_SHA256"):
        proc = await asyncio.create_subprocess_exec(
            "openssl", "s_client", "-connect", f"127.0.0.1:{hstack.https_port}",
            "-servername", "shop.test", "-tls1_3", "-ciphersuites", suite,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        async with asyncio.timeout(30):
            out, _ = await proc.communicate()
        assert f"Cipher is {suite}" in out.decode(errors="replace"), suite


def _resumed(context: ssl.SSLContext, port: int, session: ssl.SSLSession | None
             ) -> tuple[bool, ssl.SSLSession]:
    with socket.create_connection(("127.0.0.1", port), 10) as raw, context.wrap_socket(
            raw, server_hostname="shop.test", session=session) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
        while conn.recv(65536):  # the answer, and the tickets sent before it
            pass
        assert conn.session is not None
        assert conn.version() == "TLSv1.3"
        return bool(conn.session_reused), conn.session


async def test_tls13_sessions_resume_from_haproxy_s_cache_not_tickets(hstack: Stack) -> None:
    """A TLS 1.3 client resumes its session, and HAProxy finds it in its own session cache
    (``SslCacheLookups`` counts it): the session state stays in the process, no ticket key
    encrypts it for the client to carry."""
    import trustme

    from podway.haproxy import runtime
    from tests.certs import tls_secret

    cert = trustme.CA().issue_cert("shop.test")
    web = await hstack.start_echo("web")
    hstack.write("svc.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    hstack.write("secret.yaml", tls_secret("shop-tls", "default",
                                           cert.cert_chain_pems[0].bytes().decode(),
                                           cert.private_key_pem.bytes().decode()))
    hstack.write("ingress.yaml", SHOP_INGRESS.replace(
        "  rules:", "  tls:\n  - {hosts: [shop.test], secretName: shop-tls}\n  rules:"))
    await hstack.start()
    engine = hstack.standalone.haproxy
    assert engine is not None

    async def lookups() -> int:
        info = await runtime.command(engine.runtime_socket, "show info")
        return int(re.search(r"^SslCacheLookups: (\d+)", info, re.M).group(1))  # type: ignore[union-attr]

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # TLS 1.3 by default
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    reused, session = await asyncio.to_thread(_resumed, context, hstack.https_port, None)
    assert not reused
    before = await lookups()
    for _ in range(3):
        reused, session = await asyncio.to_thread(_resumed, context, hstack.https_port, session)
        assert reused
    assert await lookups() >= before + 3
