"""``explain`` agrees with Envoy: for each golden translate case, the same requests sent through
a real Envoy configured by Podway get the status class and pool ``explain`` predicted.

Each case's manifests are translated, then made local: listeners on free loopback ports, every
pool's members on one echo server named after the pool (duplicates collapse to one member, the
ready one if any), upstream TLS and active health checks dropped (the echo speaks plain HTTP and
answers at once; member readiness still comes from the manifests). ``explain`` walks the same
localised IR, with the engine's live health from its admin ``/clusters`` as ``podway run``
gives it. Requests come from the IR itself: per virtual host a concrete host (wildcards get one
and two labels), per route a request built from its match, plus a path and a host nothing
serves. TLS passthrough, TCP and UDP listeners are left out (no HTTP answer to compare).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlencode

import pytest

from podway.admin_api import parse_clusters
from podway.demo import read_response
from podway.echo import Identity
from podway.echo.server import EchoOptions, serve
from podway.engine import admin
from podway.engine.bootstrap import BootstrapOptions, bootstrap
from podway.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy_config import Builder
from podway.explain import Context, OutcomeKind, Query, explain
from podway.ir import IR, Listener, Member, MemberState, PathKind, StringMatchKind
from podway.ir import ListenerProtocol as Protocol
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate
from podway.xds.cache import Cache
from podway.xds.server import XdsServer
from tests.golden.test_translate_golden import options_of

from .harness import eventually, free_port

pytestmark = pytest.mark.e2e
GOLDEN = Path(__file__).parents[1] / "golden" / "translate"
CASES = sorted(GOLDEN.glob("*.in.yaml"))
_HTTP = (Protocol.HTTP, Protocol.HTTPS)


def _translate(case: Path) -> tuple[IR, Context]:
    text = case.read_text(encoding="utf-8")
    loaded = load_text(text, source=case.name)
    opts = options_of(text)
    result = translate(Snapshot.of_objects(loaded.objects), opts)
    return result.ir, Context(problems=result.problems, mode=str(opts.mode))


def _localize(ir: IR, echo_ports: dict[str, int]) -> IR:
    listeners = tuple(replace(ls, address="127.0.0.1", port=free_port())
                      for ls in ir.listeners if ls.protocol in _HTTP)
    pools = {}
    for name, pool in ir.pools.items():
        members: tuple[Member, ...] = ()
        if pool.members:
            best = min(pool.members, key=lambda m: m.state is not MemberState.READY)
            members = (replace(best, address="127.0.0.1", port=echo_ports[name]),)
        pools[name] = replace(pool, members=members, settings=replace(
            pool.settings, upstream_tls=None, health_check=None))
    return IR(listeners=listeners, pools=MappingProxyType(pools))


def _hosts(listener: Listener) -> Iterator[str]:
    for v in listener.virtual_hosts:
        if v.hostname == "*":
            yield "anything.invalid"
        elif v.hostname.startswith("*."):
            yield "a" + v.hostname[1:]
            yield "a.b" + v.hostname[1:]
        else:
            yield v.hostname
    yield "no-such-host.invalid"


def _queries(listener: Listener) -> Iterator[Query]:
    scheme = "https" if listener.protocol is Protocol.HTTPS else "http"
    for host in dict.fromkeys(_hosts(listener)):
        base = Query(scheme=scheme, port=listener.port, host=host,
                     sni=host if scheme == "https" else None)
        yield replace(base, path="/")
        yield replace(base, path="/zz-nothing-here")
        for vhost in listener.virtual_hosts:
            for route in vhost.routes:
                m = route.match
                if m.path.kind is PathKind.REGEX or any(
                        x.kind is StringMatchKind.REGEX for x in (*m.headers, *m.query)):
                    continue
                paths = [m.path.value]
                if m.path.kind is PathKind.PREFIX:
                    paths.append(m.path.value.rstrip("/") + "/sub")
                query = urlencode([(q.name, q.value) for q in m.query])
                for path in paths:
                    yield replace(base, path=path + (f"?{query}" if query else ""),
                                  method=m.method or "GET",
                                  headers=tuple((h.name.lower(), h.value) for h in m.headers))


async def _send(query: Query) -> tuple[str, str | None]:
    """(status class or "reset", the echo's name when a member answered)."""
    tls = None
    if query.scheme == "https":
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    headers = "".join(f"{k}: {v}\r\n" for k, v in query.headers)
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", query.port, ssl=tls, server_hostname=query.sni if tls else None)
            try:
                writer.write(f"{query.method} {query.path} HTTP/1.1\r\nHost: {query.host}\r\n"
                             f"{headers}Connection: close\r\nContent-Length: 0\r\n\r\n".encode())
                status, body = await read_response(reader)
            finally:
                writer.close()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ValueError, IndexError):
        return "reset", None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    name = data.get("name") if isinstance(data, dict) else None
    return f"{status // 100}xx", name if isinstance(name, str) else None


@contextlib.asynccontextmanager
async def _echoes(names: list[str]) -> AsyncIterator[dict[str, int]]:
    ports: dict[str, int] = {}
    tasks = []
    try:
        for name in names:
            port, started = free_port(), asyncio.Event()
            tasks.append(asyncio.create_task(serve(EchoOptions(
                port=port, identity=Identity(name=name)), started=started)))
            await started.wait()
            ports[name] = port
        yield ports
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def _envoy(ir: IR, node: str) -> AsyncIterator[str]:
    """A real Envoy serving ``ir`` (listeners bound); yields its admin address."""
    cache = Cache()
    cache.set(Builder().build(ir))
    server = XdsServer(cache, "127.0.0.1:0")
    await server.start()
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id=node, xds=server.target))))
    task = asyncio.create_task(engine.run())
    try:
        await engine.wait_ready(limit_s=30)
        address = await engine.wait_started()

        async def settled() -> bool:
            found = await admin.stats(address, r"listener_manager\.total_listeners_active$")
            if found.get("listener_manager.total_listeners_active", 0) < len(ir.listeners):
                return False
            _, body = await admin.request(address, "/clusters?format=json")
            hosts = parse_clusters(json.loads(body))
            return all(len(hosts.get(n, {})) == len(p.members) for n, p in ir.pools.items())

        await eventually(settled, limit_s=20)
        yield address
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await server.stop(0)


@pytest.mark.parametrize("case", CASES, ids=[c.name.removesuffix(".in.yaml") for c in CASES])
async def test_explain_verdicts_match_what_envoy_does(case: Path) -> None:
    """Every generated request: Envoy's status class (and the echo that answered) is one of the
    outcomes explain gave for it."""
    ir, context = _translate(case)
    if not any(ls.protocol in _HTTP for ls in ir.listeners):
        pytest.skip("no HTTP(S) listener in this case")
    async with _echoes([n for n, p in ir.pools.items() if p.members]) as ports:
        local = _localize(ir, ports)
        async with _envoy(local, case.name) as address:
            _, body = await admin.request(address, "/clusters?format=json")
            context = replace(context, health=parse_clusters(json.loads(body)))
            disagreements = []
            checked = 0
            for listener in local.listeners:
                for query in _queries(listener):
                    verdict = explain(local, query, context).verdict
                    allowed = {("served", o.pool) if o.kind is OutcomeKind.SERVED
                               else (o.status_class, None) for o in verdict.outcomes}
                    seen_class, name = await _send(query)
                    seen = ("served", name) if name is not None else (seen_class, None)
                    checked += 1
                    if seen not in allowed:
                        disagreements.append(f"{query.method} {query.target} "
                                             f"{dict(query.headers)}: Envoy {seen}, explain "
                                             f"{sorted(allowed, key=str)}: {verdict.summary}")
    assert checked > 0
    assert disagreements == []

