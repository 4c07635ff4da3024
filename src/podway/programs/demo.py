"""``podway demo``: the embedded default, end to end on one machine, without root.

1. Reads the manifests (``examples/quickstart``) and starts an echo backend for every loopback
   endpoint they name — HTTP echo, or TCP/UDP echo for LoadBalancer Services.
2. Runs standalone Podway on them (translator, xDS, a supervised Envoy).
3. Derives one probe per route from the IR — a Host header for HTTP, SNI plus certificate
   verification for HTTPS, ``whoami`` for TCP/UDP — plus one for an unknown host, sends them
   through Envoy and prints which backend answered each.

Everything binds loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from podway.ir import IR, PathKind
from podway.ir import ListenerProtocol as Protocol
from podway.model import EndpointSlice, Service, Snapshot
from podway.programs.standalone import Standalone, StandaloneOptions, listening
from podway.sources.files import load_paths
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate import TranslateOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    manifests: Path
    address: str = "127.0.0.1"  # listeners bind here; probes go here
    http_port: int = 18080
    https_port: int = 18443
    once: bool = False
    envoy_path: str | None = None
    engine: str = "envoy"  # or "haproxy" (docs/engines.md)
    as_json: bool = False  # the table as one JSON line on standard output (``-o json``)
    # The instance's state folder (``podway demo --instance``): where `podway status` and
    # `podway explain` find the running demo; None: a throw-away folder (tests, embedding).
    state_dir: Path | None = None
    # The flags that name this demo to those commands (``--instance demo``; "" for the default
    # instance), shown once it serves.
    reach: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    label: str
    protocol: Protocol
    port: int
    host: str = ""
    path: str = "/"
    ca_pem: str | None = None  # HTTPS: verify the served certificate against this


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    backend: str
    millis: float


def backends(snapshot: Snapshot) -> list[EchoOptions]:
    """One echo server per loopback endpoint address and port in the manifests."""
    out: dict[tuple[str, int, bool], EchoOptions] = {}
    for eps in snapshot.kind(EndpointSlice).values():
        service = snapshot.get(Service, eps.metadata.namespace, eps.service_name or "")
        l4 = service is not None and service.spec.type == "LoadBalancer"
        for port in eps.ports:
            if port.port is None:
                continue
            udp = port.protocol == "UDP"
            for i, endpoint in enumerate(eps.endpoints):
                name = (endpoint.target_ref.name if endpoint.target_ref
                        else f"{eps.metadata.name}-{i}")
                for address in endpoint.addresses:
                    if not address.startswith("127."):
                        continue  # the demo only ever binds loopback
                    key = (address, port.port, udp)
                    out.setdefault(key, EchoOptions(
                        address=address, port=port.port, tcp=l4 and not udp, udp=udp,
                        identity=Identity(name=name, pod=name,
                                          namespace=eps.metadata.namespace, node="demo")))
    return list(out.values())


def probes(ir: IR) -> list[Probe]:
    """One probe per route of every listener, plus a request no route matches."""
    out: list[Probe] = []
    http_port = 0
    for listener in ir.listeners:
        if listener.protocol in (Protocol.TCP, Protocol.UDP):
            out.append(Probe(label=f"{listener.protocol.lower()} :{listener.port}",
                             protocol=listener.protocol, port=listener.port))
            continue
        if listener.protocol is Protocol.HTTP:
            http_port = listener.port
        for vhost in listener.virtual_hosts:
            host = vhost.hostname.replace("*", "demo") if vhost.hostname != "*" else "any.test"
            ca = next((c.cert_pem for c in listener.certificates
                       if host in c.hostnames or not c.hostnames), None)
            for route in vhost.routes:
                if route.match.path.kind is PathKind.REGEX:
                    continue
                scheme = "https" if listener.protocol is Protocol.HTTPS else "http"
                out.append(Probe(label=f"{scheme}://{host}{route.match.path.value}",
                                 protocol=listener.protocol, port=listener.port, host=host,
                                 path=route.match.path.value, ca_pem=ca))
    if http_port:
        out.append(Probe(label="http://unknown.test/", protocol=Protocol.HTTP, port=http_port,
                         host="unknown.test"))
    return out


async def send(probe: Probe, address: str = "127.0.0.1") -> Outcome:
    began = time.perf_counter()
    if probe.protocol is Protocol.UDP:
        reply = await _udp(address, probe.port)
        return Outcome("ok", _name(reply), _ms(began))
    if probe.protocol is Protocol.TCP:
        reader, writer = await asyncio.open_connection(address, probe.port)
        try:
            writer.write(b"whoami\n")
            reply = await reader.readline()
        finally:
            writer.close()
        return Outcome("ok" if reply else "closed", _name(reply), _ms(began))
    context = None
    if probe.protocol is Protocol.HTTPS:
        context = ssl.create_default_context(cadata=probe.ca_pem) if probe.ca_pem else (
            ssl._create_unverified_context())
    reader, writer = await asyncio.open_connection(
        address, probe.port, ssl=context, server_hostname=probe.host if context else None)
    try:
        writer.write(f"GET {probe.path} HTTP/1.1\r\nHost: {probe.host}\r\n"
                     "Connection: close\r\n\r\n".encode())
        status, body = await read_response(reader)
    except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return Outcome("not HTTP", "-", _ms(began))  # something else answers on that port
    finally:
        writer.close()
    if 300 <= status < 400:  # e.g. plain HTTP of a TLS host, sent to HTTPS
        return Outcome(str(status), "Envoy (redirect)", _ms(began))
    return Outcome(str(status), _name(body), _ms(began))


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response (Content-Length or read to close)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP response: {lines[0][:40]!r}")
    status = int(parts[1])
    length = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                   if k.strip().lower() == "content-length"), None)
    body = await (reader.readexactly(length) if length is not None else reader.read())
    return status, body


async def _udp(address: str, port: int) -> bytes:
    loop = asyncio.get_running_loop()
    received: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            if not received.done():
                received.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=(address, port))
    try:
        transport.sendto(b"whoami")
        async with asyncio.timeout(2):
            return await received
    finally:
        transport.close()


def _name(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return "Envoy (no backend)" if not body.strip() else body.decode(errors="replace")[:40]
    return str(data.get("name", "?")) if isinstance(data, dict) else "?"


def _ms(began: float) -> float:
    return (time.perf_counter() - began) * 1000


async def run_demo(opts: DemoOptions, console: Console) -> list[tuple[Probe, Outcome]]:
    loaded = load_paths([opts.manifests])
    snapshot = Snapshot.of_objects(loaded.objects)
    plan = backends(snapshot)
    standalone = Standalone(StandaloneOptions(
        manifests=opts.manifests, envoy_path=opts.envoy_path, drain_s=0.5,
        engine_kind=opts.engine,
        state_dir=opts.state_dir,
        translate=TranslateOptions(address=opts.address, http_port=opts.http_port,
                                   https_port=opts.https_port)))
    async with asyncio.TaskGroup() as group:
        tasks = []
        for echo in plan:
            started = asyncio.Event()
            tasks.append(group.create_task(serve(echo, started=started),
                                           name=f"echo-{echo.identity.name}"))
            await started.wait()
        console.print(f"started {len(plan)} echo backends: "
                      + ", ".join(f"{e.identity.name}@{e.address}:{e.port}" for e in plan))
        tasks.append(group.create_task(standalone.run(), name="standalone"))
        state = await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
        await _engine_ready(standalone, state.generation)
        results = [(p, await _retry(p, opts.address)) for p in probes(state.ir)]
        if opts.as_json:
            print(json.dumps(rows(results)), flush=True)
        else:
            console.print(_table(results))
        if opts.once:
            for task in tasks:
                task.cancel()
        else:
            host = f"[{opts.address}]" if ":" in opts.address else opts.address
            console.print(f"serving: http://{host}:{opts.http_port} "
                          f"https://{host}:{opts.https_port} — edit {opts.manifests} live; "
                          "Ctrl-C stops")
            if opts.state_dir is not None:
                flags = f" {opts.reach}" if opts.reach else ""
                console.print(f"ask it: podway status{flags}; podway explain "
                              f"http://{host}:{opts.http_port}/{flags}",
                              markup=False, highlight=False, soft_wrap=True)
    return results


async def _engine_ready(standalone: Standalone, generation: int) -> None:
    """Until the engine serves ``generation`` (Envoy: ready; HAProxy: that IR applied)."""
    if standalone.opts.engine_kind != "haproxy":
        engine = await standalone.engine()
        assert engine is not None
        await engine.wait_ready()
        await listening(standalone, engine)  # every listener bound, or one line and exit 2
        return
    async with asyncio.timeout(30):
        while standalone.haproxy is None or standalone.haproxy_generation < generation:  # noqa: ASYNC110 (plain fields the standalone sets)
            await asyncio.sleep(0.02)


async def _retry(probe: Probe, address: str) -> Outcome:
    """Listeners bind a moment after Envoy reports ready; retry refused connections briefly."""
    for _ in range(40):
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            return await send(probe, address)
        await asyncio.sleep(0.05)
    return Outcome("refused", "-", 0.0)


def rows(results: list[tuple[Probe, Outcome]]) -> list[dict[str, object]]:
    """The table's rows as data (``podway demo -o json``)."""
    return [{"request": probe.label, "status": outcome.status, "answered_by": outcome.backend,
             "ms": round(outcome.millis, 1)} for probe, outcome in results]


def _table(results: list[tuple[Probe, Outcome]]) -> Table:
    table = Table(title="request → backend that answered")
    for column in ("request", "status", "answered by", "ms"):
        table.add_column(column)
    for probe, outcome in results:
        table.add_row(probe.label, outcome.status, outcome.backend, f"{outcome.millis:.1f}")
    return table
