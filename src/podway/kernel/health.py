"""Active health checks of the kernel engine's members: a TCP connect, on the pool's schedule.

``Judge`` is the decision, pure and synchronous: results in, health out, with the pool's
thresholds (``HealthCheck``: out after ``unhealthy_threshold`` failures in a row, back after
``healthy_threshold`` successes; a new member is *pending* until its first check, and in after
its first good one).

Whether a pending member takes new flows depends on its pool when it joined. Joining a pool
with a healthy member (a rollout's new pod), it waits for its first good check. Joining a pool
with none (the engine's start, a pool whose members were all replaced, a changed check), it
keeps taking flows until its first check says otherwise, as the panic rule
(``podway.kernel.plan``) already served it. Otherwise the first round of checks, which ends
member by member, would narrow the table to the first member checked and widen it again: two
changes within a tenth of an interval, each moving most ClientIP clients to another member
and briefly sending every new flow to one.

``Checker`` is the thin asyncio shell: one task per (pool, member) that connects every
``interval_ms`` (after a failed check or while the member is down, every
``quick_interval_ms``: ``next_wait_s``), plus up to 10 % jitter so checks of many members
never align, with ``timeout_ms`` to connect, and tells ``on_change`` when a member's health
moved.

What is checked follows the IR (``follow``): members of pools with a TCP-kind ``health_check``
and state READY or NOT_READY (a pod held back by the readiness gate is listed not ready until
the engines found it healthy: it must be checked to ever get there; only READY members take
flows, ``podway.kernel.plan``). A pool without a check (UDP pools, or checks turned off) has
no task: its members count as healthy, as Envoy counts them. HTTP and gRPC checks are an
Envoy matter: a pool asking for one (never on a plain L4 pool from the translator) gets a TCP
connect here.

``view`` is the engine's member health in the controller's wire form
(``podway.engines.member_health``): the same (pool, "address:port") keys and the same three
states the Envoy engine reports, so the readiness gate and status read it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podway.engines.member_health import Health, HostKey, HostState
from podway.ir import IR, HealthCheck, Member, MemberState

log = logging.getLogger(__name__)

JITTER = 0.1  # up to this share of the interval is added to each wait
CHECKED = (MemberState.READY, MemberState.NOT_READY)  # members checked and reported


def host_key(pool: str, member: Member) -> HostKey:
    """The key the controller names a member by (``podway.engines.member_health``)."""
    return (pool, f"{member.address}:{member.port}")


@dataclass(slots=True)
class Judge:
    """One member's health from its check results (module docstring)."""

    check: HealthCheck
    health: Health = Health.PENDING
    successes: int = 0
    failures: int = 0
    reason: str = field(default="waiting for its first health check")
    serve_pending: bool = False  # joined a pool with no healthy member (module docstring)

    def result(self, ok: bool, why: str = "") -> bool:
        """Record one check; True when the health changed."""
        before = self.health
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.health is Health.PENDING or self.successes >= self.check.healthy_threshold:
                self.health, self.reason = Health.HEALTHY, ""
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.health is Health.PENDING or \
                    self.failures >= self.check.unhealthy_threshold:
                self.health = Health.UNHEALTHY
                self.reason = f"failed active health check{f' ({why})' if why else ''}"
        return self.health is not before

    @property
    def state(self) -> HostState:
        return HostState(self.health, self.reason)


def checked_members(ir: IR) -> dict[HostKey, tuple[Member, HealthCheck]]:
    """Every member to check, with its pool's check (module docstring)."""
    out: dict[HostKey, tuple[Member, HealthCheck]] = {}
    for pool in ir.pools.values():
        check = pool.settings.health_check
        if check is None or pool.settings.protocol.value == "udp":
            continue
        for member in pool.members:
            if member.state in CHECKED:
                out[host_key(pool.name, member)] = (member, check)
    return out


async def tcp_connect(address: str, port: int, timeout_s: float) -> str:
    """"" when a TCP connection to ``address:port`` opens within ``timeout_s``; else why not."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), timeout_s)
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ""


Probe = Callable[[str, int, float], Awaitable[str]]  # (address, port, timeout) → "" or why


def next_wait_s(check: HealthCheck, *, failed: bool, health: Health) -> float:
    """Seconds to the member's next check: the short interval after a failed check or while
    it is down (``HealthCheck.quick_interval_ms``, as Envoy and HAProxy wait), else the
    pool's interval."""
    quick = failed or health is Health.UNHEALTHY
    return (check.quick_interval_ms if quick else check.interval_ms) / 1000


class Checker:
    """Checks the members ``follow`` was last given; ``on_change`` after each health move."""

    def __init__(self, on_change: Callable[[], None], *,
                 probe: Probe = tcp_connect,
                 rng: random.Random | None = None) -> None:
        self.on_change = on_change
        self._probe = probe
        self._rng = rng or random.Random()
        self._judges: dict[HostKey, Judge] = {}
        self._tasks: dict[HostKey, tuple[HealthCheck, asyncio.Task[None]]] = {}
        self._checked: set[HostKey] = set()  # keys a pool asks to check (others are healthy)

    def usable(self, pool: str, member: Member) -> bool:
        """May ``member`` of ``pool`` take new flows: healthy, pending in a pool that had no
        healthy member when it joined (module docstring), or in a pool without checks."""
        key = host_key(pool, member)
        if key not in self._checked:
            return True
        judge = self._judges.get(key)
        return judge is not None and (judge.health is Health.HEALTHY or (
            judge.health is Health.PENDING and judge.serve_pending))

    def judged(self) -> Mapping[HostKey, HostState]:
        """The members checked so far, as judged (one not followed yet is absent; a member of
        a pool without checks too): a live view, O(1) to make."""
        return _Judged(self._judges)

    def view(self, ir: IR) -> Mapping[HostKey, HostState]:
        """Every ready or not-ready member of ``ir``'s pools as the controller is told (module
        docstring)."""
        out: dict[HostKey, HostState] = {}
        for pool in ir.pools.values():
            for member in pool.members:
                if member.state not in CHECKED:
                    continue
                key = host_key(pool.name, member)
                judge = self._judges.get(key)
                out[key] = judge.state if judge is not None else HostState(Health.HEALTHY)
        return MappingProxyType(out)

    def follow(self, ir: IR) -> None:
        """Check exactly the members ``ir`` asks for: start new tasks, stop gone ones (a
        member whose check changed starts over as pending)."""
        wanted = checked_members(ir)
        self._checked = set(wanted)
        for key in [k for k in self._tasks if k not in wanted or self._tasks[k][0]
                    != wanted[k][1]]:
            self._tasks.pop(key)[1].cancel()
            self._judges.pop(key, None)
        served = {k[0] for k, (member, _) in wanted.items() if member.state is MemberState.READY
                  and k in self._judges and self._judges[k].health is Health.HEALTHY}
        for key, (member, check) in wanted.items():
            if key not in self._tasks:
                self._judges[key] = Judge(check, serve_pending=key[0] not in served)
                task = asyncio.get_running_loop().create_task(
                    self._loop(key, member, check), name=f"kernel-check {key[0]} {key[1]}")
                self._tasks[key] = (check, task)

    async def close(self) -> None:
        tasks = [task for _, task in self._tasks.values()]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, key: HostKey, member: Member, check: HealthCheck) -> None:
        interval = check.interval_ms / 1000
        # The first check soon (a new member waits for it), spread over a tenth of the interval.
        await asyncio.sleep(self._rng.uniform(0, interval * JITTER))
        while True:
            why = await self._probe(member.address, member.port, check.timeout_ms / 1000)
            judge = self._judges.get(key)
            if judge is None:
                return
            if judge.result(not why, why):
                log.info("kernel engine: member %s of %s is %s%s", key[1], key[0],
                         judge.health.value, f" ({judge.reason})" if judge.reason else "")
                self.on_change()
            wait = next_wait_s(check, failed=bool(why), health=judge.health)
            await asyncio.sleep(wait * (1 + self._rng.uniform(0, JITTER)))




class _Judged(Mapping[HostKey, HostState]):
    """``Checker.judged``: each judge's state, read when asked."""

    def __init__(self, judges: Mapping[HostKey, Judge]) -> None:
        self._judges = judges

    def __getitem__(self, key: HostKey) -> HostState:
        return self._judges[key].state

    def __iter__(self) -> Iterator[HostKey]:
        return iter(self._judges)

    def __len__(self) -> int:
        return len(self._judges)
