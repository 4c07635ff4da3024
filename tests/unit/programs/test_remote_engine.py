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
