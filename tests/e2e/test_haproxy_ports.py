"""Who may bind a port HAProxy serves (issue 29): by default one owner per address and port, as
for Envoy — a second HAProxy engine (another folder, the same user) asking for the same port is
refused and the first keeps serving alone (HAProxy's own default, SO_REUSEPORT, let the two split
the connections between their configurations). With ``reuse_port`` (``podway engine
--listener-reuse-port``, set by the chart) a successor binds beside the running one, and the
old one, stopped with a drain, hands the port over with no failed request: the rolling update
with surge of a HAProxy engine group. Each engine's configuration forwards to its own echo, so
the answers say which one served."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest

from podway.haproxy.process import HAProxyEngine, HAProxyError, HAProxyOptions
from podway.ir import IR
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate

from .harness import SHOP_INGRESS, Load, echo_backend, endpoints, free_port, service

pytestmark = pytest.mark.e2e


def ir_to(port: int, http: int) -> IR:
    text = service("web", 80, port) + "---\n" + endpoints("web", {"TCP": port}) + "---\n" \
        + SHOP_INGRESS
    return translate(Snapshot.of_objects(load_text(text, source="t").objects),
                     TranslateOptions(address="127.0.0.1", http_port=http,
                                      https_port=free_port())).ir


async def until(check: Callable[[], bool], what: str, within: float = 15.0) -> None:
    """Poll ``check`` (it reads other tasks' and processes' state) until it holds."""
    try:
        async with asyncio.timeout(within):
            while not check():  # noqa: ASYNC110 (the load's counts, other tasks')
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def answers(load: Load, n: int) -> None:
    """``n`` more answers (a count, not a time: the machine is loaded)."""
    target = load.ok + len(load.failed) + n
    await until(lambda: load.ok + len(load.failed) >= target, f"{n} more answers")


async def test_a_second_haproxy_cannot_take_a_port_by_accident(short_dir: Path) -> None:
    http = free_port()
    (port_a, echo_a), (port_b, echo_b) = await echo_backend("a"), await echo_backend("b")
    first = HAProxyEngine(HAProxyOptions(folder=short_dir / "a"))
    second = HAProxyEngine(HAProxyOptions(folder=short_dir / "b"))
    runs = [asyncio.create_task(e.run()) for e in (first, second)]
    load: Load | None = None
    try:
        assert await first.apply(ir_to(port_a, http)) == "start"
        load = Load(http, "shop.test")
        with pytest.raises(HAProxyError) as refused:
            await second.apply(ir_to(port_b, http))
        assert refused.value.refused, refused.value
        assert "Address already in use" in refused.value.refused[0][1]
        await answers(load, 40)
        assert load.seen == {"a"}  # never the second configuration
        assert load.failed == []
    finally:
        if load is not None:
            await load.stop()
        for task in (*runs, echo_a, echo_b):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_with_reuse_port_a_successor_binds_beside_and_the_old_one_drains(
        short_dir: Path, migrating_loopback: str) -> None:
    """In a namespace with ``tcp_migrate_req=1``, as the install asks of engine nodes: without
    it a connection still queued on the old HAProxy's socket when it closes is reset."""
    http = free_port()
    (port_a, echo_a), (port_b, echo_b) = await echo_backend("a"), await echo_backend("b")
    opts = {"reuse_port": True, "drain_s": 5.0}
    old = HAProxyEngine(HAProxyOptions(folder=short_dir / "a", **opts))  # type: ignore[arg-type]
    new = HAProxyEngine(HAProxyOptions(folder=short_dir / "b", **opts))  # type: ignore[arg-type]
    old_run, new_run = asyncio.create_task(old.run()), asyncio.create_task(new.run())
    load: Load | None = None
    try:
        assert await old.apply(ir_to(port_a, http)) == "start"
        load = Load(http, "shop.test")
        await answers(load, 20)
        assert await new.apply(ir_to(port_b, http)) == "start"  # binds beside the old one
        await until(lambda: load is not None and "b" in load.seen, "the successor answering")
        old_run.cancel()  # the old pod's SIGTERM: it drains, then stops
        with contextlib.suppress(asyncio.CancelledError):
            await old_run
        load.seen.clear()
        await answers(load, 40)
        assert load.seen == {"b"}
        assert load.failed == [], load.failed[:5]
        assert load.ok > 60
    finally:
        if load is not None:
            await load.stop()
        for task in (old_run, new_run, echo_a, echo_b):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
