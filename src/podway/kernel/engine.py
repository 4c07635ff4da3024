"""The kernel engine: IR states in, one nftables transaction per change out, checks beside.

``KernelEngine.run(irs)`` follows a stream of IRs (the pipeline's states). After each IR, and
after each member health move the ``Checker`` reports, it plans the services
(``podway.kernel.plan``), renders the whole table (``podway.kernel.ruleset.full``) and, when
the text differs from what it last installed, writes the change in one transaction through
``write`` (libnftables in-process, or ``nft -f -``: the caller chooses; tests pass a fake): the
first write makes the table (``ruleset.full``), every later one changes it in place
(``ruleset.update``: the hooks stay, and no new flow passes them undecided). Changes that
arrive while a write runs are coalesced into the next one: the kernel always gets the newest
state, never a backlog.

Invariants:

* After a write, UDP flows to a member no longer chosen (failed, removed) are deleted from
  conntrack (``forget``; ``plan.stale_udp`` says why), so the next datagram takes the new rules.
* Reads only the IR (``podway.ir``): never Kubernetes objects or the translator.
* Make before break (``podway.engines.handover``): a change that takes serving members out of
  a checked pool while no member it keeps or gets is healthy keeps the leaving members taking
  new flows (still checked) until another one is healthy or the hold's bound ends; a new
  member then waits for its first good check, as it does joining a pool with a healthy one.
* The table outlives the engine: stopping (cancellation) leaves the rules serving, so a
  restarted Podway takes over without a gap (its first write replaces the table in one
  transaction);
  ``podway kernel cleanup`` removes it.
* A failed write is logged in one line (once while it keeps failing the same way) and tried
  again with the newest state (``retry_s``, doubling to 30 s); the table keeps what it had,
  whole (a transaction either applies or not at all). The retry makes the table anew
  (``full``): an in-place change assumes the table is as this engine left it, and a failure
  may mean it is not (``podway kernel cleanup`` ran, another program changed it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from podway.base.errors import PodwayError
from podway.engines import handover
from podway.engines.member_health import HostKey, HostState
from podway.ir import IR, EngineKind
from podway.ir.engines import kernel_unsupported
from podway.kernel import ruleset
from podway.kernel.health import Checker
from podway.kernel.plan import Service, Skipped, StaleFlows, plan, stale_udp

log = logging.getLogger(__name__)

Write = Callable[[str], Awaitable[None]]
Forget = Callable[[tuple[StaleFlows, ...]], Awaitable[None]]  # delete those conntrack entries
# planned services → the same with members on this host's NodePortLocal ports replaced by their
# pods (``plan.through_local_ports``; the host's agent can change them: looked at again every
# ``refresh_s``)
Resolve = Callable[[tuple[Service, ...]], Awaitable[tuple[Service, ...]]]


class KernelEngine:
    def __init__(self, write: Write, *, table: str = ruleset.TABLE, every_l4: bool = True,
                 alone: bool = False, forget: Forget | None = None,
                 checker: Callable[[Callable[[], None]], Checker] = Checker,
                 retry_s: float = 1.0, resolve: Resolve | None = None,
                 refresh_s: float = 5.0, traffic_counters: bool = False) -> None:
        self.write = write
        self.table = table
        self.every_l4 = every_l4  # False: only listeners the IR gives the kernel (plan.plan)
        self.alone = alone  # no other engine here: say which listeners nobody serves
        self.forget = forget  # after a write: drop UDP flows to members no longer chosen
        self.retry_s = retry_s
        self.resolve, self.refresh_s = resolve, refresh_s
        # per-member packets and bytes: a lookup on every forwarded packet (ruleset docstring);
        # connections per member are always counted, at no per-packet cost
        self.traffic = traffic_counters
        self.checker = checker(self._changed)
        self.ir = IR()  # as served: with the members a change leaves held (``_handover``)
        self._handover = handover.Holds()
        self._hold_end: asyncio.TimerHandle | None = None
        self.services: tuple[Service, ...] = ()
        self.skipped: tuple[Skipped, ...] = ()
        self.installed: str | None = None  # the ruleset text the kernel has now
        self._desired: str | None = None  # that text in generation 0 (compared, not shown)
        self._live: tuple[Service, ...] = ()  # what the kernel serves (its last good write)
        self._holds: ruleset.Installed | None = None  # None: the next write makes the table
        self.writes = 0  # changes applied (each one transaction, or three in place: _write)
        self._dirty = asyncio.Event()
        self._local = False  # the last plan had members on this host's NodePortLocal ports
        self._applied = asyncio.Condition()
        self._said: tuple[Skipped, ...] = ()

    def view(self) -> Mapping[HostKey, HostState]:
        """Member health in the controller's wire form (``podway.engines.member_health``)."""
        return self.checker.view(self.ir)

    def _changed(self) -> None:
        self._dirty.set()

    async def run(self, irs: AsyncIterator[IR]) -> None:
        """Serve each IR ``irs`` yields until cancelled (the table stays: module docstring)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._apply_loop(), name="kernel-apply")
                if self.resolve is not None:
                    group.create_task(self._refresh(), name="kernel-refresh")
                async for ir in irs:
                    self._serve(self._handover.serve(ir, self._handover.changed(ir),
                                                     self.checker.judged(), time.monotonic()))
        finally:
            if self._hold_end is not None:
                self._hold_end.cancel()
            await self.checker.close()

    def _serve(self, ir: IR) -> None:
        """Plan ``ir`` (the IR given, with held members) next; check what it asks for."""
        self.ir = ir
        self.checker.follow(ir)
        self._dirty.set()
        if self._hold_end is not None:
            self._hold_end.cancel()
        end = self._handover.next_end()
        self._hold_end = None if end is None else asyncio.get_running_loop().call_later(
            max(0.0, end - time.monotonic()), self._dirty.set)

    def _settle(self) -> None:
        """End the holds whose pool has another member healthy, or whose bound passed
        (``podway.engines.handover``), and serve the IR as given again."""
        given = self._handover.given
        if given is None or not self._handover.holds:
            return
        judged, now = self.checker.judged(), time.monotonic()
        if self._handover.settle(judged, now):
            self._serve(self._handover.serve(given, self._handover.changed(given), judged, now))

    async def wait_installed(self, predicate: Callable[[KernelEngine], bool]) -> None:
        """Until ``predicate(self)`` holds after a write (tests, benchmarks)."""
        async with self._applied:
            await self._applied.wait_for(lambda: predicate(self))

    def render(self) -> str:
        """Plan the current IR with the current health and render the table's text."""
        self.services, self.skipped = plan(self.ir, self.checker.usable, every_l4=self.every_l4)
        if self.alone and not self.every_l4:
            self.skipped += unserved(self.ir)
        if self.skipped != self._said:
            for skip in set(self.skipped) - set(self._said):
                log.warning("kernel engine: not serving %s: %s", skip.name, skip.reason)
            self._said = self.skipped
        return ruleset.full(self.services, self.table, traffic=self.traffic)

    async def _refresh(self) -> None:
        """Look at the host's agent again every ``refresh_s``, only while some member is one
        of its NodePortLocal ports (a pod behind a port can change with no new IR); without
        one, re-planning the whole IR every few seconds would find nothing."""
        while True:
            await asyncio.sleep(self.refresh_s)
            if self._local:
                self._dirty.set()

    async def _resolved(self, text: str) -> str:
        """``text`` for the planned services with local members resolved (``Resolve``)."""
        if self.resolve is None:
            return text
        try:
            resolved = await self.resolve(self.services)
        except PodwayError as exc:
            log.warning("kernel engine: this host's NodePortLocal ports not read (%s)", exc)
            return text
        self._local = resolved != self.services
        if not self._local:
            return text
        self.services = resolved
        return ruleset.full(resolved, self.table, traffic=self.traffic)

    async def _write(self, services: tuple[Service, ...]) -> ruleset.Installed:
        """Make the table (the first time, or after a failure) or change it in place: three
        transactions, the second the switch (``ruleset.update``). Returns what it serves."""
        if self._holds is None:
            await self.write(ruleset.full(services, self.table, traffic=self.traffic))
            return ruleset.Installed(services, traffic=self.traffic)
        steps, holds = ruleset.update(self._holds, services, self.table)
        for step in steps:
            if step:
                await self.write(step)
        return holds

    async def _apply_loop(self) -> None:
        failed, failures = "", 0  # the last write error, and how many in a row
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self._settle()
            text = await self._resolved(self.render())
            if text == self._desired:
                continue
            before = self._live
            try:
                holds = await self._write(self.services)
            except PodwayError as exc:
                self._holds = None
                error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                # The same failure again (no root, no nftables) says nothing new.
                log.log(logging.ERROR if error != failed else logging.DEBUG,
                        "kernel engine: the ruleset was not applied (%s); trying again", error)
                failed, failures = error, failures + 1
                await asyncio.sleep(min(self.retry_s * 2 ** (failures - 1), 30.0))
                self._dirty.set()
                continue
            failed, failures = "", 0
            self._live, self._holds, self._desired = self.services, holds, text
            stale = stale_udp(before, self.services)
            if stale and self.forget is not None:
                try:
                    await self.forget(stale)
                except PodwayError as exc:  # best effort: such flows then age out on their own
                    log.warning("kernel engine: stale UDP flows not deleted (%s)", exc)
            self.installed = ruleset.full(self.services, self.table, holds.gen,
                                          traffic=self.traffic)
            self.writes += 1
            log.info("kernel engine: %d services, %d members installed", len(self.services),
                     sum(len(s.backends) for s in self.services))
            async with self._applied:
                self._applied.notify_all()


def unserved(ir: IR) -> tuple[Skipped, ...]:
    """The listeners the IR gives another engine, each with why the kernel does not take it."""
    out = []
    for listener in ir.listeners:
        if listener.engine is EngineKind.KERNEL:
            continue
        names = [b.pool for r in listener.l4_routes for b in r.backends if b.pool]
        why = kernel_unsupported(listener, ((n, ir.pools[n].settings) for n in names
                                            if n in ir.pools))
        out.append(Skipped(name=listener.name, reason=why or "its Service chose the Envoy "
                           "engine (podway.io/engine: envoy), which is not running here"))
    return tuple(out)
