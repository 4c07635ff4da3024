"""Which controller replica writes: leader election over a ``coordination.k8s.io/v1`` Lease.

Every replica watches the cluster, translates and serves xDS to engines; only the leader writes
(statuses, events, VIP allocations — published through statuses — and the NodePortLocal opt-in
annotation). ``LeaseElector`` runs client-go's algorithm (decisions in
``podway.programs.controller.lease``): a candidate tries to take the Lease every ``retry_period_s``
(times ``1 + jitter·rand``), the leader renews it every ``retry_period_s``, every update carries
the ``resourceVersion`` it read (optimistic concurrency: ``409`` loses the race), and a leader
that stops cleanly hands the Lease back (empty holder, 1 s) so the next one takes over at once.

The split-brain guard: a leader counts as leader only until ``renew_deadline_s`` after the
start of its last successful renew, on its own clock — checked at the moment of each write, not
by the renew loop. A replica paused or cut off stops writing at that instant, and since
``renew_deadline_s < lease_duration_s`` and the others count the lease duration from when they
*saw* that renew, it stops before anyone else may start. A leader that sees the Lease held by
another stops at once. (The clock is ``CLOCK_BOOTTIME``: it runs on while the process is stopped
or the machine suspended, so a ``SIGSTOP``-ed or frozen leader resumes as a follower.)

The interface writers use is ``Leadership`` (a ``Protocol``; ``Unelected`` always leads, for
``--leader-elect=false`` and standalone use):

- ``is_leader()``: may this replica write right now;
- ``fence()``: a ``Fence`` for the current term; ``fence.valid()`` is true only while this
  replica still leads *in that term*, so a write prepared before a loss (or before a loss and a
  re-election) is dropped rather than sent. Check it immediately before each request;
- ``wait_leader(after_term=…)``: wait for a term newer than one already handled (a new leader
  writes what is pending: its writers compare with what the API holds and send only diffs).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from kubernetes_asyncio import client

from podway.base.errors import ConfigError
from podway.base.tasks import cancel_and_wait
from podway.kube.errors import ApiError, api_error
from podway.pipeline import Pipeline, PipelineStopped, State
from podway.programs.controller.lease import Candidate, LeaseRecord, micro_time
from podway.programs.controller.metrics import ControllerMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fence:
    """A write permit for one term (0: no term; never valid)."""

    term: int
    _check: Callable[[int], bool] = field(repr=False, compare=False)

    def valid(self) -> bool:
        """True while the replica still leads in this term (check right before each write)."""
        return self.term > 0 and self._check(self.term)


class Leadership(Protocol):
    def is_leader(self) -> bool: ...

    def fence(self) -> Fence: ...

    async def wait_leader(self, *, after_term: int = 0) -> Fence: ...


class Unelected:
    """No election (``--leader-elect=false``, one replica by design): always the leader."""

    def is_leader(self) -> bool:
        return True

    def fence(self) -> Fence:
        return Fence(1, lambda _: True)

    async def wait_leader(self, *, after_term: int = 0) -> Fence:
        if after_term < 1:
            return self.fence()
        await asyncio.Event().wait()  # no later term ever comes
        raise AssertionError("unreachable")


ALWAYS = Unelected()


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionSettings:
    """The Lease and its timing (client-go's defaults and rules)."""

    namespace: str
    identity: str  # unique per process: client-go's host name + "_" + a UUID
    name: str = "podway-controller"
    lease_duration_s: int = 15
    """How long followers wait, after last seeing the Lease change, before taking it: the
    failover time when a leader dies without handing it back."""
    renew_deadline_s: float = 10.0
    """A leader that has not renewed for this long stops writing (< ``lease_duration_s``)."""
    retry_period_s: float = 2.0
    """Between a leader's renewals and a candidate's tries (candidates: times 1 + jitter·rand)."""
    jitter: float = 1.2

    def check(self) -> None:
        """One ``ConfigError`` line for timings that would break the guarantee."""
        if self.lease_duration_s < 1:
            raise ConfigError("--lease-duration-s must be at least 1")
        if not self.renew_deadline_s < self.lease_duration_s:
            raise ConfigError("--renew-deadline-s must be shorter than --lease-duration-s "
                              "(a leader must stop writing before others may take over)")
        if not 0 < self.retry_period_s * self.jitter < self.renew_deadline_s:
            raise ConfigError(f"--retry-period-s times {self.jitter} must be positive and shorter "
                              "than --renew-deadline-s (several renewals fit in one deadline)")
        if not self.namespace or not self.name or not self.identity:
            raise ConfigError("the Lease needs a namespace, a name and an identity")


def boot_clock() -> float:
    """Seconds on a clock that runs on while the process is stopped and while the machine is
    suspended (Linux ``CLOCK_BOOTTIME``; elsewhere the monotonic clock): a leader frozen with
    its VM must find its deadline passed when it wakes."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str:
    """Where the Lease lives unless told: ``POD_NAMESPACE`` (the downward API), else the
    service account's namespace (in a Pod), else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        if found:
            return found
    return "default"


def default_identity() -> str:
    """client-go's choice: the host (Pod) name and a UUID, unique per process start (a
    restarted replica is a new candidate, never a leader that merely forgot)."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def parse_enabled(flag: str, value: str) -> bool:
    """``true``/``false`` (Kubernetes' ``--leader-elect=false`` form)."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{flag} must be true or false, not {value!r}")


class LeaseElector:
    """Runs the election until cancelled (see the module docstring)."""

    def __init__(self, api: client.ApiClient, settings: ElectionSettings, *,
                 metrics: ControllerMetrics | None = None,
                 clock: Callable[[], float] = boot_clock,
                 rand: Callable[[], float] = random.random) -> None:
        settings.check()
        self.settings = settings
        self._api = api
        self.metrics = metrics or ControllerMetrics()
        self._clock = clock
        self._rand = rand
        self._candidate = Candidate(settings.identity, duration_s=settings.lease_duration_s)
        self._term = 0  # terms this process has led, counting up from 1
        self._leading = False
        self._valid_until = 0.0  # on ``clock``: writes stop here unless renewed
        self._changed = asyncio.Event()  # replaced at each change of leadership
        self._last_problem = ""
        self.metrics.leader.set(0)

    # ---- Leadership --------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self._leading and self._clock() < self._valid_until

    def fence(self) -> Fence:
        return Fence(self._term if self.is_leader() else 0, self._holds)

    def _holds(self, term: int) -> bool:
        return term == self._term and self.is_leader()

    async def wait_leader(self, *, after_term: int = 0) -> Fence:
        while not (self.is_leader() and self._term > after_term):
            changed = self._changed
            if self._leading and not self.is_leader():
                self._lost("renew deadline passed")  # noticed here before the loop did
                continue
            await changed.wait()
        return self.fence()

    @property
    def holder(self) -> str:
        """Who holds the Lease as this replica last saw it ("" : nobody, or not read yet)."""
        record = self._candidate.observed
        return record.holder if record is not None else ""

    # ---- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        s = self.settings
        log.info("leader election: Lease %s/%s as %s (lease %d s, renew deadline %.1f s, "
                 "retry %.1f s)", s.namespace, s.name, s.identity, s.lease_duration_s,
                 s.renew_deadline_s, s.retry_period_s)
        try:
            while True:
                await self._round()
                await asyncio.sleep(self._pause())
        finally:
            await self._step_down()

    async def _round(self) -> None:
        s = self.settings
        started = self._clock()
        try:
            async with asyncio.timeout(s.renew_deadline_s):
                ok = await self._try()
        except TimeoutError:
            ok = False
            self._problem(f"no answer within {s.renew_deadline_s:g} s")
        except Exception as exc:  # the API away or refusing: not the leader for now
            ok = False
            self._problem(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if ok:
            self._last_problem = ""
            if not self.is_leader():  # first time, or the deadline passed meanwhile
                if self._leading:
                    self._lost("renew deadline passed")
                self._term += 1
                self._valid_until = started + s.renew_deadline_s
                self._leading = True
                self.metrics.leader.set(1)
                self.metrics.leader_transitions.labels(change="acquired").inc()
                log.info("became the leader (Lease %s/%s, term %d)", s.namespace, s.name,
                         self._term)
                self._notify()
            else:
                self._valid_until = started + s.renew_deadline_s
        elif self._leading and self.holder not in ("", s.identity):
            self._lost(f"now held by {self.holder}")  # seen: stop now, not at the deadline
        elif self._leading and not self.is_leader():
            self._lost(f"not renewed within {s.renew_deadline_s:g} s")

    def _pause(self) -> float:
        s = self.settings
        if not self._leading:
            return s.retry_period_s * (1 + s.jitter * self._rand())
        # Wake at the deadline too, so a lapse shows in the gauge at once.
        return max(0.0, min(s.retry_period_s, self._valid_until - self._clock()))

    async def _try(self) -> bool:
        """One read and, unless another holder's lease is live, one create or update."""
        s = self.settings
        coordination: Any = client.CoordinationV1Api(self._api)  # raw calls (dict bodies)
        status, found = await _raw(coordination.read_namespaced_lease(
            s.name, s.namespace, _preload_content=False))
        if status == 404:
            found = None
        elif status != 200 or found is None:
            raise _refused("read", status, found)
        record = None if found is None else LeaseRecord.from_spec(found.get("spec"))
        wanted = self._candidate.want(record, now=self._clock(), wall=micro_time())
        if wanted is None:
            return False
        if found is None:
            body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                    "metadata": {"name": s.name, "namespace": s.namespace},
                                    "spec": wanted.to_spec()}
            status, answer = await _raw(coordination.create_namespaced_lease(
                s.namespace, body, _preload_content=False))
        else:
            body = {**found, "spec": {**(found.get("spec") or {}), **wanted.to_spec()}}
            status, answer = await _raw(coordination.replace_namespaced_lease(
                s.name, s.namespace, body, _preload_content=False))
        if status == 409:  # another candidate wrote first (or created it meanwhile)
            return False
        if status not in (200, 201):
            raise _refused("write", status, answer)
        self._candidate.wrote(wanted, now=self._clock())
        return True

    def _lost(self, why: str) -> None:
        self._leading = False
        self._valid_until = 0.0
        self.metrics.leader.set(0)
        self.metrics.leader_transitions.labels(change="lost").inc()
        log.warning("stopped leading (Lease %s/%s, term %d): %s; writes stop, xDS goes on",
                    self.settings.namespace, self.settings.name, self._term, why)
        self._notify()

    async def _step_down(self) -> None:
        """Stop writing, then hand the Lease back so another replica takes over at once."""
        if not self._leading:
            return
        self._lost("shutting down")
        released = self._candidate.release(wall=micro_time())
        if released is None:
            return
        s = self.settings
        coordination: Any = client.CoordinationV1Api(self._api)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(min(2.0, s.renew_deadline_s)):
                status, found = await _raw(coordination.read_namespaced_lease(
                    s.name, s.namespace, _preload_content=False))
                if status != 200 or found is None or LeaseRecord.from_spec(
                        found.get("spec")).holder != s.identity:
                    return
                body = {**found, "spec": {**(found.get("spec") or {}), **released.to_spec()}}
                status, _ = await _raw(coordination.replace_namespaced_lease(
                    s.name, s.namespace, body, _preload_content=False))
                if status == 200:
                    log.info("handed the Lease %s/%s back", s.namespace, s.name)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _problem(self, message: str) -> None:
        if message != self._last_problem:  # once per distinct problem, not every retry
            log.warning("Lease %s/%s: %s", self.settings.namespace, self.settings.name, message)
            self._last_problem = message


async def _raw(call: Any) -> tuple[int, dict[str, Any] | None]:
    """Status and JSON body of a raw (``_preload_content=False``) call."""
    resp = await call
    try:
        text = await resp.text()
        status = int(resp.status)
    finally:
        resp.release()
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    return status, body if isinstance(body, dict) else None


def _refused(what: str, status: int, body: dict[str, Any] | None) -> ApiError:
    reason = f"({what} refused) " + str((body or {}).get("message") or "")[:200]
    return api_error(SimpleNamespace(status=status, reason=reason))


async def leader_states(pipeline: Pipeline, leadership: Leadership
                        ) -> AsyncIterator[tuple[State, bool]]:
    """Each new state (coalesced), and the current one again when this replica starts a
    term as the leader (then with True): a new leader writes what is pending at once."""
    seen, term = 0, 0
    while True:
        fence = leadership.fence()
        state = pipeline.state
        leads = fence.valid() and fence.term > term
        if state is not None and (state.version > seen or leads):
            term = fence.term if leads else term
            seen = state.version
            yield state, leads
            continue
        newer = asyncio.ensure_future(pipeline.wait_for(functools.partial(_after, seen)))
        # With no state yet there is nothing to write for a new term: wait for the first
        # state alone (it is yielded with the term it finds). Waiting for the term too spun
        # this loop as fast as the event loop let it on a leader while the first LISTs ran
        # or were retried, wait_leader answering at once.
        waits = (newer,) if state is None else (
            newer, asyncio.ensure_future(leadership.wait_leader(after_term=term)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:  # a cancel of this follower arriving meanwhile is raised, not taken for theirs
            await cancel_and_wait(*waits)
        if newer.done() and not newer.cancelled() and \
                isinstance(newer.exception(), PipelineStopped):
            return  # the pipeline ended: so does the write-back


def _after(version: int, state: State) -> bool:
    return state.version > version
