"""``explain`` agrees with Envoy: for each golden translate case, the same requests sent through
a real Envoy configured by Podway get the status class and pool ``explain`` predicted.

Each case's manifests are translated, then made local: listeners on free loopback ports, every
pool's members on one echo server named after the pool (duplicates collapse to one member, the
ready one if any), upstream TLS and active health checks dropped (the echo speaks plain HTTP and
answers at once; member readiness still comes from the manifests). ``explain`` walks the same
localised IR, with the engine's live health from its admin ``/clusters`` as ``podway run``
gives it. Requests come from the IR itself: per virtual host a concrete host (wildcards get one
and two labels), per route a request built from its match, plus a path and a host nothing
serves. L4 listeners get a connection each (TLS passthrough: per SNI name, an unknown name and
none), and the TCP/UDP echo's ``whoami`` says which pool took it; a closed connection (or no UDP
answer) is "reset". Each Host and SNI name is also sent in capitals and with a trailing dot,
as clients do (``_names``); explain is given them as sent, as a hand-built ``Query``.
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
from typing import Any
from urllib.parse import urlencode

import pytest

from podway.envoy.config import Builder
from podway.envoy.config.scoped import SCOPED_MIN_HOSTS, pick
from podway.envoy.engine import admin
from podway.envoy.xds.cache import Cache
from podway.ir import (
    IR,
    Listener,
    Member,
    MemberState,
    PathKind,
    Pool,
    PoolProtocol,
    StringMatchKind,
    VirtualHost,
)
from podway.ir import ListenerProtocol as Protocol
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.programs.demo import read_response
from podway.readers.admin_api import parse_clusters
from podway.readers.explain import Context, OutcomeKind, Query, explain
from podway.readers.explain.tls import by_sni, sni_chains
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate import translate
from tests.golden.test_translate_golden import options_of

from .harness import eventually, free_port, free_port_both, private_engine

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


def _populated(ir: IR) -> IR:
    """Every pool without members gets one ready member (cases often leave pools empty)."""
    return replace(ir, pools=MappingProxyType({
        n: p if p.members else replace(p, members=(Member(address="198.18.0.1", port=1),))
        for n, p in ir.pools.items()}))


def _localize(ir: IR, echo_ports: dict[str, int]) -> IR:
    listeners = tuple(replace(ls, address="127.0.0.1", port=free_port_both()
                              if ls.protocol is Protocol.UDP else free_port())
                      for ls in ir.listeners)
    pools = {}
    for name, pool in ir.pools.items():
        members: tuple[Member, ...] = ()
        if pool.members:
            best = min(pool.members, key=lambda m: m.state is not MemberState.READY)
            members = (replace(best, address="127.0.0.1", port=echo_ports[name]),)
        pools[name] = replace(pool, members=members, settings=replace(
            pool.settings, upstream_tls=None, health_check=None))
    return IR(listeners=listeners, pools=MappingProxyType(pools))


def _names(name: str) -> list[str]:
    """A host or SNI name as clients may send it: as it is, in capitals (names match in any
    case) and with a trailing dot (the absolute form; Host: dropped, SNI: kept by the engine)."""
    return [name, name.upper(), name + "."]


def _hosts(listener: Listener) -> Iterator[tuple[str, VirtualHost | None]]:
    """(host, the virtual host it stands for, when it is only another spelling of a name
    already sent: its requests go to that virtual host's routes only)."""
    for v in listener.virtual_hosts:
        if v.hostname == "*":
            yield "anything.invalid", None
            continue
        name = "a" + v.hostname[1:] if v.hostname.startswith("*.") else v.hostname
        yield name, None
        if name != v.hostname:
            yield "a.b" + v.hostname[1:], None
        for other in _names(name)[1:]:
            yield other, v
    yield "no-such-host.invalid", None


def _queries(listener: Listener) -> Iterator[Query]:
    """Per host: a request with that Host and (HTTPS) the same SNI, as Python's ssl sends it;
    with a trailing dot also the SNI without it, as curl and browsers send it."""
    scheme = "https" if listener.protocol is Protocol.HTTPS else "http"
    hosts = [(h, h, v) for h, v in dict(_hosts(listener)).items()]
    if scheme == "https":
        hosts += [(h, h[:-1], v) for h, _, v in hosts if h.endswith(".")]
    for host, sni, only in hosts:
        base = Query(scheme=scheme, port=listener.port, host=host, source_ip="127.0.0.1",
                     sni=sni if scheme == "https" else None)
        yield replace(base, path="/")
        yield replace(base, path="/zz-nothing-here")
        for vhost in listener.virtual_hosts if only is None else (only,):
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


def _l4_queries(listener: Listener) -> Iterator[Query]:
    scheme = {Protocol.TCP: "tcp", Protocol.UDP: "udp", Protocol.TLS: "tls"}[listener.protocol]
    base = Query(scheme=scheme, port=listener.port, address="127.0.0.1")
    if listener.protocol is not Protocol.TLS:
        yield base
        return
    names = [h for r in listener.l4_routes for h in r.hostnames]
    for name in dict.fromkeys([*names, "no-such-host.invalid"]):
        for sni in _sni_forms(name):
            yield replace(base, sni=sni)
    yield base  # no SNI at all


def _sni_forms(name: str) -> list[str]:
    """An SNI name's spellings (``_names``); a wildcard's with one label, and with two."""
    if not name.startswith("*."):
        return _names(name)
    return [*_names("a" + name[1:]), "a.b" + name[1:]]


def _passthrough_queries(listener: Listener) -> Iterator[Query]:
    base = Query(scheme="tls", port=listener.port, address="127.0.0.1")
    for name in dict.fromkeys(h for r in listener.l4_routes for h in r.hostnames):
        for sni in _sni_forms(name):
            yield replace(base, sni=sni)


def _client_hello(sni: str | None) -> bytes:
    """The first flight of a TLS client, as bytes (passthrough forwards it untouched)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=sni)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _terminates(listener: Listener, sni: str | None) -> bool:
    """The L4 route this SNI reaches on a TLS listener has the engine terminate TLS."""
    chosen = by_sni(sni_chains((r.name, r.hostnames) for r in listener.l4_routes), sni)
    route = (next(r for r in listener.l4_routes if r.name == chosen[0]) if chosen else
             next((r for r in listener.l4_routes if not r.hostnames), None))
    return route is not None and route.certificate is not None


async def _send_l4(query: Query, *, terminate: bool = False) -> tuple[str, str | None]:
    """("served", the echo's name) when a member answered ``whoami``, else ("reset", None).
    ``terminate``: a real TLS client (the engine decrypts and forwards plain bytes)."""
    if query.scheme == "udp":
        return await _send_udp(query.port)
    tls = None
    if terminate:
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", query.port, ssl=tls, server_hostname=query.sni if tls else None)
            try:
                if query.scheme == "tls" and not terminate:  # forwarded iff echoed back
                    hello = _client_hello(query.sni)
                    writer.write(hello)
                    await reader.readexactly(len(hello))
                writer.write(b"whoami\n")
                line = await reader.readline()
            finally:
                writer.close()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
        return "reset", None
    return _whoami(line)


async def _send_udp(port: int) -> tuple[str, str | None]:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            if not answer.done():
                answer.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    try:
        transport.sendto(b"whoami\n")
        async with asyncio.timeout(2):  # no answer in 2 s: nothing took the datagram
            return _whoami(await answer)
    except TimeoutError:
        return "reset", None
    finally:
        transport.close()


def _whoami(line: bytes) -> tuple[str, str | None]:
    try:
        name = json.loads(line).get("name")
    except (ValueError, AttributeError):
        return "reset", None
    return ("served", name) if isinstance(name, str) else ("reset", None)


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
async def _echoes(pools: list[Pool]) -> AsyncIterator[dict[str, int]]:
    """One echo per pool, speaking the pool's protocol (a PROXY v2 header first, when the pool
    sends one), named after it."""
    ports: dict[str, int] = {}
    tasks = []
    try:
        for pool in pools:
            name, started = pool.name, asyncio.Event()
            udp = pool.settings.protocol is PoolProtocol.UDP
            tcp = pool.settings.protocol is PoolProtocol.TCP
            port = free_port_both() if udp else free_port()
            tasks.append(asyncio.create_task(serve(EchoOptions(
                port=port, identity=Identity(name=name), tcp=tcp, udp=udp,
                proxy_protocol=pool.settings.proxy_protocol), started=started)))
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
async def _envoy(ir: IR, node: str, *, scoped: bool = False) -> AsyncIterator[str]:
    """A real Envoy serving ``ir`` (listeners bound, members listed); yields its admin
    address. ``scoped``: an exact-hostname HTTP listener is served as scopes at any size."""
    cache = Cache()
    cache.set(Builder(scoped_min_hosts=1 if scoped else SCOPED_MIN_HOSTS).build(ir))
    async with private_engine(cache, node_id=node) as engine:
        await engine.wait_ready(limit_s=30)
        address = await engine.wait_started()

        async def settled() -> bool:
            found = await admin.stats(address, r"listener_manager\.total_listeners_active$")
            if found.get("listener_manager.total_listeners_active", 0) < len(ir.listeners):
                return False
            _, body = await admin.request(address, "/clusters?format=json")
            hosts = parse_clusters(json.loads(body))
            return all(len(hosts.get(n, {})) == len(p.members) for n, p in ir.pools.items())

        await eventually(settled, within=20)
        yield address


def _forms() -> list[Any]:
    """(case, form) pairs: every case as it is and populated; scoped only where one of its
    listeners can be served as scopes (the others have nothing scoped to check)."""
    out = []
    for case in CASES:
        name = case.name.removesuffix(".in.yaml")
        out += [pytest.param(case, form, id=f"{name}-{form}") for form in ("as-is", "populated")]
        if pick(_populated(_translate(case)[0]).listeners, 1) is not None:
            out.append(pytest.param(case, "scoped", id=f"{name}-scoped"))
    return out


@pytest.mark.parametrize(("case", "form"), _forms())
async def test_explain_verdicts_match_what_envoy_does(case: Path, form: str) -> None:
    """Every generated request: Envoy's status class (and the echo that answered) is one of the
    outcomes explain gave for it; once as the case is, once with every empty pool given a
    member, and once so with an exact-hostname HTTP listener served as scopes (one table per
    host, ``podway.envoy.config.scoped``), the form large listeners get."""
    ir, context = _translate(case)
    if form != "as-is":
        ir = _populated(ir)
    if not ir.listeners:
        pytest.skip("no listener in this case")
    async with _echoes([p for p in ir.pools.values() if p.members]) as ports:
        local = _localize(ir, ports)
        async with _envoy(local, case.name, scoped=form == "scoped") as address:
            _, body = await admin.request(address, "/clusters?format=json")
            context = replace(context, health=parse_clusters(json.loads(body)))
            disagreements = []
            checked = 0
            for listener in local.listeners:
                http = listener.protocol in _HTTP
                queries = [(q, http) for q in (_queries(listener) if http
                                               else _l4_queries(listener))]
                if listener.protocol is Protocol.HTTPS and listener.l4_routes:
                    # SNI names passed through on the shared HTTPS port: raw TLS, L4 verdicts
                    queries += [(q, False) for q in _passthrough_queries(listener)]
                for query, http in queries:
                    verdict = explain(local, query, context).verdict
                    allowed = {("served", o.pool) if o.kind is OutcomeKind.SERVED
                               else (o.status_class, None) for o in verdict.outcomes}
                    if not http:  # L4: a member answered, or the connection went nowhere
                        allowed = {a if a[0] == "served" else ("reset", None) for a in allowed}
                    seen_class, name = await (_send(query) if http else _send_l4(
                        query, terminate=query.scheme == "tls" and _terminates(
                            listener, query.sni)))
                    seen = ("served", name) if name is not None else (seen_class, None)
                    checked += 1
                    if seen not in allowed:
                        disagreements.append(f"{query.method} {query.target} SNI "
                                             f"{query.sni} {dict(query.headers)}: Envoy "
                                             f"{seen}, explain "
                                             f"{sorted(allowed, key=str)}: {verdict.summary}")
    assert checked > 0
    assert disagreements == []

