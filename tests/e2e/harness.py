"""A real stack for end-to-end tests: echo backends + standalone Podway + Envoy, loopback only.

Every port is ephemeral, every task is cancelled and every Envoy is stopped in teardown, even
when the test fails (the state folder is ephemeral, so Envoy also dies with the test process).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podway.base.tasks import cancel_and_wait
from podway.envoy.engine.bootstrap import BootstrapOptions, EnvoyStats, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.engine.state import StateDir, open_state
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.protocol import Event
from podway.envoy.xds.server import XdsServer
from podway.pipeline import State
from podway.programs.demo import read_response
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.tools.echo import Health, Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate import TranslateOptions
from podway.translate.core.options import BackendMode
from tests.waiting import eventually as poll

# Listener ports for tests come from below the kernel's ephemeral range (32768-60999 by
# default): a port picked there and released could be handed to an outgoing connection before
# Envoy binds it. Random picks spread concurrent test runs; each is checked free before use.
_TEST_PORTS = range(20000, 32000)


_GIVEN: set[int] = set()  # ports handed out by this process (until most of the range was)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free now, and not handed out before by this process: two ports asked for before
    either is bound (an IR's listeners, say) never collide."""
    if len(_GIVEN) > len(_TEST_PORTS) * 3 // 4:
        _GIVEN.clear()
    for _ in range(200):
        port = random.choice(_TEST_PORTS)
        if port in _GIVEN:
            continue
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _GIVEN.add(port)
            return port
    raise RuntimeError("no free test port below the ephemeral range")


def free_port_both() -> int:
    """A port free for TCP and UDP at once (for a Service with both protocols)."""
    for _ in range(50):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free for both TCP and UDP")


@dataclass
class Stack:
    root: Path
    http_port: int
    https_port: int
    standalone: Standalone
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start_echo(self, name: str, *, tcp: bool = False, udp: bool = False,
                         port: int | None = None, health: Health | None = None) -> int:
        port, task = await echo_backend(name, tcp=tcp, udp=udp, port=port, health=health)
        self.tasks.append(task)
        return port

    def write(self, name: str, text: str) -> None:
        tmp = self.root / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.root / name)  # atomic, like a careful editor

    @property
    def haproxy(self) -> bool:
        return self.standalone.opts.engine_kind == "haproxy"

    async def start(self) -> None:
        self.tasks.append(asyncio.create_task(self.standalone.run(), name="standalone"))
        async with asyncio.timeout(30):
            await self.applied(1)
            if self.haproxy:
                while self.standalone.haproxy is None:  # noqa: ASYNC110 (set by run(), once)
                    await asyncio.sleep(0.02)
                await self.standalone.haproxy.wait_ready()
                await self.served(1)
                return
            engine = await self.engine()
            await engine.wait_ready()

    async def served(self, generation: int, limit_s: float = 10.0) -> None:
        """With the HAProxy engine: until it serves ``generation`` (Envoy: ``applied``)."""
        await self.applied(generation, limit_s)
        if self.haproxy:
            async with asyncio.timeout(limit_s):
                while self.standalone.haproxy_generation < generation:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)  # (a plain counter the standalone bumps)

    async def engine(self) -> Engine:
        engine = await self.standalone.engine()
        assert engine is not None
        return engine

    @property
    def state(self) -> State:
        """The newest published state (after ``start``)."""
        state = self.standalone.pipeline.state
        assert state is not None
        return state

    async def applied(self, generation: int, limit_s: float = 10.0) -> State:
        """The first state with at least ``generation`` source updates applied."""
        async with asyncio.timeout(limit_s):
            return await self.standalone.pipeline.wait_for(lambda s: s.generation >= generation)

    async def stop(self) -> None:
        await cancel_and_wait(*reversed(self.tasks))  # a test's own cancel is not swallowed


async def echo_backend(name: str, *, tcp: bool = False, udp: bool = False,
                       port: int | None = None, health: Health | None = None
                       ) -> tuple[int, asyncio.Task[None]]:
    """An echo backend answering as ``name``, started; its port and task (cancel it after).
    ``health``: what its ``/healthz`` answers (``Health(healthy=False)``: 503, while every
    other request is answered)."""
    port = port or (free_port_both() if udp else free_port())
    started = asyncio.Event()
    opts = EchoOptions(port=port, tcp=tcp, udp=udp, identity=Identity(name=name),
                       health=health or Health())
    task = asyncio.create_task(serve(opts, started=started), name=f"echo-{name}")
    await started_or_failed(task, started)
    return port, task


async def started_or_failed(task: asyncio.Task[Any], started: asyncio.Event, *,
                            limit_s: float = 30) -> None:
    """Until ``task`` says it ``started``. A task that ends first (its port taken by another
    process, say) fails here with its own error instead of leaving the wait hanging."""
    waiting = asyncio.ensure_future(started.wait())
    try:
        await asyncio.wait({task, waiting}, timeout=limit_s,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if not started.is_set():
        if task.done():
            task.result()  # its error, as it happened
            raise AssertionError(f"{task.get_name()} ended without starting")
        raise AssertionError(f"{task.get_name()} did not start within {limit_s:.0f} s")


def shop_ingress(port: int = 80) -> str:
    """One Ingress host, shop.test → Service web port ``port``."""
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: default}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: {port}}}}}}}}}
"""


# The same at port 80, shared by the engine and member tests.
SHOP_INGRESS = shop_ingress()


def backend_manifests(name: str, port: int) -> str:
    """A ClusterIP Service ``name`` port 80 and its EndpointSlice at 127.0.0.1:``port``."""
    return service(name, 80, port) + "---\n" + endpoints(name, {"TCP": port})


async def make_stack(root: Path, *, delta: bool = True, drain_s: float = 0,
                     xff_trusted_hops: int = 0, takeover_classes: tuple[str, ...] = (),
                     real_ip_header: bool = False, mode: BackendMode = BackendMode.CLUSTERIP,
                     **options: Any) -> Stack:
    """A stack (not started). Envoy keeps detailed stats: tests read per-pool counters.
    ``options`` go to ``StandaloneOptions`` (a dashboard, metrics, …)."""
    http_port, https_port = free_port(), free_port()
    options.setdefault("envoy_stats", EnvoyStats.DETAILED)
    standalone = Standalone(StandaloneOptions(
        manifests=root, drain_s=drain_s, delta=delta, status_file=root.parent / "status.yaml",
        translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                   https_port=https_port, xff_trusted_hops=xff_trusted_hops,
                                   takeover_classes=takeover_classes,
                                   real_ip_header=real_ip_header, mode=mode),
        **options))
    return Stack(root, http_port, https_port, standalone)


async def get(port: int, host: str, path: str = "/", *, tls: ssl.SSLContext | None = None,
              sni: str | None = None) -> tuple[int, dict[str, object]]:
    """One request through Envoy: status and the echo's JSON (empty if not JSON)."""
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname=(sni or host) if tls else None)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                         "Connection: close\r\n\r\n".encode())
            status, body = await read_response(reader)
        finally:
            writer.close()
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    return status, data if isinstance(data, dict) else {}


class Load:
    """Clients sending requests to ``path`` back to back (a new connection each) until
    stopped. Anything but a 200 counts as failed, a connection closed before its answer (EOF)
    too; ``seen``: the names the echo answered with."""

    def __init__(self, port: int, host: str, clients: int = 4,
                 tls: ssl.SSLContext | None = None, path: str = "/") -> None:
        self.port, self.host, self.tls, self.path = port, host, tls, path
        self.ok = 0
        self.failed: list[str] = []
        self.seen: set[object] = set()
        self._tasks = [asyncio.create_task(self._client(), name=f"load-{i}")
                       for i in range(clients)]

    async def _client(self) -> None:
        while True:
            try:
                status, body = await get(self.port, self.host, self.path, tls=self.tls)
            except (OSError, TimeoutError, ValueError, EOFError) as e:  # EOF: cut, unanswered
                self.failed.append(repr(e))
                continue
            if status == 200:
                self.ok += 1
                self.seen.add(body.get("name"))
            else:
                self.failed.append(str(status))

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)


# What a check against something still settling (a restart, a new listener) may meet before it
# holds: the shared ``eventually`` retries those here.
SETTLING = (OSError, AssertionError, TimeoutError, ValueError)
eventually = functools.partial(poll, every=0.05, ignoring=SETTLING)


def service(name: str, port: int, target: int, *, lb: bool = False, protocols: tuple[str, ...]
            = ("TCP",), namespace: str = "default",
            annotations: dict[str, str] | None = None) -> str:
    ports = ", ".join(f"{{name: p-{p.lower()}, port: {port}, targetPort: {target}, "
                      f"protocol: {p}}}" for p in protocols)
    kind = "LoadBalancer" if lb else "ClusterIP"
    notes = (", annotations: {" + ", ".join(f"{k}: {v}" for k, v in annotations.items()) + "}"
             if annotations else "")
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}{notes}}}
spec:
  type: {kind}
  selector: {{app: {name}}}
  ports: [{ports}]
"""


def endpoints(name: str, ports: dict[str, int], addresses: tuple[str, ...] = ("127.0.0.1",),
              namespace: str = "default", slice_name: str | None = None) -> str:
    port_list = ", ".join(f"{{name: p-{proto.lower()}, port: {p}, protocol: {proto}}}"
                          for proto, p in ports.items())
    eps = "\n".join(f"- addresses: [{a}]\n  conditions: {{ready: true}}" for a in addresses)
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice_name or name + '-1'}
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{port_list}]
endpoints:
{eps}
"""


@contextlib.asynccontextmanager
async def private_engine(cache: Cache, *, node_id: str,
                         on_event: Callable[[Event], None] | None = None
                         ) -> AsyncIterator[Engine]:
    """An xDS server on ``cache`` and one Envoy on it, connected the way the co-located engine
    is (the private unix socket of an ephemeral state folder, so Secrets are sent); both
    stopped after the block. Await ``engine.wait_ready()`` inside it as needed."""
    server = XdsServer(cache, "", on_event=on_event)
    with open_state(None) as state:
        await server.start(local=state.xds_socket)
        try:
            async with engine_on(server, node_id=node_id, state=state) as engine:
                yield engine
        finally:
            await server.stop(0)


@contextlib.asynccontextmanager
async def engine_on(server: XdsServer, *, node_id: str, delta: bool = False,
                    state: StateDir | None = None) -> AsyncIterator[Engine]:
    """One Envoy on ``server`` (delta or state-of-the-world xDS), stopped after the block."""
    engine = Engine(EngineOptions(
        envoy_path=find_envoy(), drain_s=0, state=state, bootstrap=bootstrap(
            BootstrapOptions(node_id=node_id, xds=server.target, delta=delta))))
    task = asyncio.create_task(engine.run(), name=f"engine-{node_id}")
    try:
        yield engine
    finally:
        await cancel_and_wait(task)
