"""``podway vip announce-metallb``: one engine host's BGP speaker configured live from MetalLB's
objects in the API (``podway.programs.vip.metallb`` says what they mean).

It watches, in MetalLB's namespace, ``BGPPeer``, ``BGPAdvertisement``, ``Community``,
``BFDProfile`` and ``IPAddressPool``, the Secrets there (only a ``kubernetes.io/basic-auth``
Secret's ``password`` is kept, in memory), and this host's Node (its labels, for the node
selectors). With ``metallb=False`` (``--no-metallb``: the chart's ``fromVIPPeers``) only
Podway's own ``VIPPeer``, ``VIPAdvertisement`` and ``VIPPool`` are read, and the Secrets of
``namespace``; MetalLB's kinds are not listed at all. After a change (coalesced over
``debounce_s``) the plan is worked out again; when it differs BIRD's configuration is
rewritten (0600) and applied with ``birdc configure``, which restarts only the sessions whose
own configuration changed: a peer added, removed or edited leaves the other sessions
Established. Each problem of the objects is logged once, as a
warning. While ``healthy`` says no, nothing is announced (the sessions stay up).

``sessions`` reads every session's state from BIRD (``birdc show protocols``), for the
metrics and the ``BGPSessionState`` objects (``metallb_sessions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from podway.base.errors import EnvironmentProblem
from podway.kube.informer import Informer, Raw
from podway.model.kinds import METALLB_SPEAKER_KINDS, PODWAY_SPEAKER_KINDS
from podway.programs.vip.bird import BgpSettings
from podway.programs.vip.metallb import Plan
from podway.programs.vip.metallb_follow import Follower
from podway.programs.vip.podway_bgp import plan_both
from podway.programs.vip.speaker import BirdSpeaker

log = logging.getLogger(__name__)

# kind → (API version, plural) as MetalLB serves them (the kinds table's rows)
CUSTOM = {k.name: (k.versions[0], k.plural) for k in METALLB_SPEAKER_KINDS}


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One BGP session as BIRD reports it."""

    name: str  # BIRD's protocol name (peer_<BGPPeer name>)
    state: str  # BIRD's protocol state: up, start, down
    info: str  # Established, Active, Connect, OpenSent, …

    @property
    def established(self) -> bool:
        return self.info.startswith("Established")


def parse_protocols(text: str) -> list[Session]:
    """The BGP lines of ``birdc show protocols``."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[1] == "BGP":
            # name proto table state since info…, "since" a time, or a date and a time
            rest = fields[5:]
            if rest and re.match(r"\d+:\d+", rest[0]):
                rest = rest[1:]
            out.append(Session(name=fields[0], state=fields[3], info=" ".join(rest)))
    return out


def _secret(raw: Raw) -> Raw:
    """Only what a password needs: a basic-auth Secret's ``password``."""
    meta = raw.get("metadata") or {}
    data = raw.get("data") or {}
    kept = {"password": data["password"]} if raw.get("type") == "kubernetes.io/basic-auth" \
        and "password" in data else {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "type": raw.get("type"), "data": kept}


class MetalLBSpeaker(Follower):
    """BIRD for one host, configured from MetalLB's objects (module docstring)."""

    COMPONENT = "podway-vip-announce-metallb"

    def __init__(self, api: client.ApiClient, *, namespace: str, node: str, router_id: str,
                 workdir: Path, vips: Sequence[str] | None = None, prefix: Sequence[str] = (),
                 debounce_s: float = 0.2,
                 healthy: Callable[[], Awaitable[bool]] | None = None,
                 metallb: bool = True) -> None:
        super().__init__(namespace=namespace, node=node)
        self.metallb = metallb  # False: Podway's kinds only (MetalLB's are not even listed)
        self._api = api
        self.router_id = router_id
        self._vips = tuple(vips) if vips is not None else None
        self._debounce = debounce_s
        self._healthy = healthy
        self.speaker = BirdSpeaker(BgpSettings(router_id=router_id, local_as=1, neighbors=(),
                                               bfd=False, require_neighbors=False),
                                   workdir=workdir, prefix=prefix)
        self.plan: Plan | None = None
        self.applied = 0  # configurations applied (for tests)
        self._announcing = healthy is None

    def informers(self) -> list[Informer]:
        custom = client.CustomObjectsApi(self._api)
        core = client.CoreV1Api(self._api)
        out = self._kind_informers(custom, METALLB_SPEAKER_KINDS) if self.metallb else []
        out += self._podway_informers(custom, PODWAY_SPEAKER_KINDS)
        out.append(Informer(name="metallb-secrets", lister=functools.partial(
            core.list_namespaced_secret, self.namespace), params={},
            handler=self._handler("Secret"), transform=_secret))
        out.append(self._node_informer(core))
        return out

    async def run(self) -> None:
        """Until cancelled: follow the objects; on the way out withdraw and stop BIRD."""
        informers = self.informers()
        async with asyncio.TaskGroup() as group:
            for informer in informers:
                group.create_task(informer.run(), name=f"announce-{informer.name}")
            await asyncio.gather(*(i.settled.wait() for i in informers))
            for informer in informers:
                if informer.refused is not None:
                    log.warning("event=metallb-kind-not-readable informer=%s error=%s",
                                informer.name, informer.refused)
            first = self._plan()
            await self.speaker.start(first.vips if self._announcing else ())
            self.applied += 1
            if self._healthy is not None:
                group.create_task(self._follow_health(), name="announce-health")
            while True:
                await self._dirty.wait()
                await asyncio.sleep(self._debounce)
                self._dirty.clear()
                await self.apply()

    def _plan(self) -> Plan:
        self._dirty.clear()
        found = plan_both(self.objects, node_labels=self.node_labels,
                          router_id=self.router_id, namespace=self.namespace, vips=self._vips)
        self.report(found.problems)
        self.plan = found
        self.speaker.settings = found.settings
        return found

    async def apply(self) -> None:
        """Work the plan out again; reconfigure BIRD when it changed."""
        before = (self.speaker.settings, self.speaker.vips)
        found = self._plan()
        vips = found.vips if self._announcing else ()
        if (found.settings, vips) == before:
            return
        try:
            await self.speaker.announce(vips)
        except EnvironmentProblem as err:  # BIRD refused it: it still runs the last one
            log.error("event=bgp-reconfigure-refused error=%s (keeping the last configuration)",
                      err)
            self.speaker.settings = before[0]
            self.speaker.rewrite(before[1])
            return
        self.applied += 1
        log.info("event=bgp-reconfigured peers=%d routes=%d", len(found.settings.neighbors),
                 len(vips))

    async def _follow_health(self, interval: float = 0.2, fall: int = 2, rise: int = 2) -> None:
        assert self._healthy is not None
        streak = 0
        while True:
            ok = await self._healthy()
            streak = streak + 1 if ok != self._announcing else 0
            if streak >= (rise if not self._announcing else fall):
                self._announcing, streak = ok, 0
                log.warning("engine %s: %s VIPs", "healthy" if ok else "unhealthy",
                            "announcing" if ok else "withdrawing")
                await self.apply()
            await asyncio.sleep(interval)

    async def sessions(self) -> list[Session]:
        return parse_protocols(await self.speaker.show_protocols())

    async def stop(self, withdraw_wait: float = 0.0) -> None:
        """Withdraw everything, wait, stop BIRD."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self.speaker.announce(()))
            await asyncio.shield(asyncio.sleep(withdraw_wait))
        await self.speaker.stop()


def describe(sessions: Sequence[Session]) -> dict[str, Any]:
    """Sessions as a log line's fields."""
    return {s.name: s.info or s.state for s in sessions}
