"""``podway engine --engine haproxy|kernel``: the view it reports and the newest-IR channel."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from podway.engines.member_health import Health, HostState
from podway.engines.reporter import ReportOptions
from podway.programs.remote_engine import Latest, RemoteEngine, RemoteOptions

OK, SICK = HostState(Health.HEALTHY), HostState(Health.UNHEALTHY, "failed active health check")
WEB, DB = "pool/shop/web/80", "pool/shop/db/5432/tcp"


@dataclass
class FakeHAProxy:
    seen: Any

    async def health(self) -> Any:
        return self.seen


@dataclass
class FakeService:
    pools: tuple[str, ...]


@dataclass
class FakeKernel:
    seen: dict[Any, HostState]
    services: tuple[FakeService, ...] = ()
    installed: str | None = "table"
    writes: int = field(default=1)

    def view(self) -> Any:
        return MappingProxyType(self.seen)


def _engine(kind: str, tmp_path: Path) -> RemoteEngine:
    return RemoteEngine(RemoteOptions(kind=kind, folder=tmp_path, report=ReportOptions(
        node_id="e", xds="unix:/nowhere.sock")))


async def test_beside_haproxy_the_kernel_speaks_for_the_pools_it_serves(tmp_path: Path) -> None:
    """HAProxy's view for its pools; for the pools of the listeners the kernel serves, the
    kernel engine's own checks (HAProxy checks them too, but does not serve them)."""
    engine = _engine("haproxy", tmp_path)
    engine.haproxy = FakeHAProxy({(WEB, "10.0.0.1:80"): OK,  # type: ignore[assignment]
                                  (DB, "10.0.0.2:5432"): OK})
    assert await engine.view() == {(WEB, "10.0.0.1:80"): OK, (DB, "10.0.0.2:5432"): OK}
    engine.kernel = FakeKernel({(DB, "10.0.0.2:5432"): SICK, (WEB, "10.0.0.1:80"): SICK},
                               services=(FakeService((DB,)),))  # type: ignore[assignment]
    assert await engine.view() == {(WEB, "10.0.0.1:80"): OK, (DB, "10.0.0.2:5432"): SICK}
    engine.haproxy = FakeHAProxy(None)  # type: ignore[assignment]
    assert await engine.view() is None  # HAProxy not answering: the last view stands


async def test_the_kernel_engine_alone_reports_once_its_table_is_installed(
        tmp_path: Path) -> None:
    engine = _engine("kernel", tmp_path)
    assert await engine.view() is None
    engine.kernel = FakeKernel({(DB, "10.0.0.2:5432"): OK},  # type: ignore[assignment]
                               installed=None)
    assert await engine.view() is None  # nothing programmed yet: "never reported"
    engine.kernel.installed = "table"  # type: ignore[union-attr]
    assert await engine.view() == {(DB, "10.0.0.2:5432"): OK}


async def test_latest_gives_each_reader_the_newest_value_and_skips_the_rest() -> None:
    latest: Latest[int] = Latest()
    got: list[int] = []

    async def read() -> None:
        async for value in latest.values():
            got.append(value)
            await asyncio.sleep(0.05)  # slow: values put meanwhile are skipped to the newest

    task = asyncio.create_task(read())
    try:
        latest.put(1)
        await asyncio.sleep(0.01)
        for value in (2, 3, 4):
            latest.put(value)
        await asyncio.sleep(0.2)
        assert got == [1, 4]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_reported_config_is_the_served_files_or_a_note_over_the_bound() -> None:
    """The report carries haproxy.cfg and every map as the engine writes them; a rendering
    over the report's bound is replaced by one line saying where to read it, never cut."""
    from podway.engines.member_health import MAX_CONFIG_CHARS
    from podway.haproxy.render import RenderOptions, render
    from podway.ir import (
        IR,
        Forward,
        Listener,
        ListenerProtocol,
        ObjectRef,
        PathKind,
        PathMatch,
        Pool,
        Route,
        RouteMatch,
        VirtualHost,
        WeightedPool,
    )
    from podway.programs.remote_engine import config_files

    def ir(hosts: int) -> IR:
        route = Route(name="r", match=RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value="/")),
                      action=Forward(backends=(WeightedPool(pool="p"),)),
                      origin=ObjectRef(kind="Ingress", namespace="default", name="web"))
        vhosts = tuple(VirtualHost(name=f"v{i}", hostname=f"h{i}.test", routes=(route,))
                       for i in range(hosts))
        listener = Listener(name="l", address="127.0.0.1", port=80,
                            protocol=ListenerProtocol.HTTP, virtual_hosts=vhosts)
        return IR(listeners=(listener,), pools=MappingProxyType({"p": Pool(name="p")}))

    small = render(ir(2), RenderOptions(folder="/s", runtime_socket="/s/rt.sock"))
    files = config_files(small)
    assert files["haproxy.cfg"] == small.config
    assert files["maps/fe:l.hosts.map"].startswith("h0.test ")
    assert set(files) == {"haproxy.cfg", *small.maps}
    big = render(ir(40_000), RenderOptions(folder="/s", runtime_socket="/s/rt.sock"))
    note = config_files(big)
    assert list(note) == ["haproxy.cfg"]
    assert note["haproxy.cfg"].startswith("# not reported: ")
    assert str(MAX_CONFIG_CHARS) in note["haproxy.cfg"]
