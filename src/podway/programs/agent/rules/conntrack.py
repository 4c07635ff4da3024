"""Forget stale UDP flows once a mapping is re-pointed or removed.

DNAT is decided on a flow's first packet and kept in its conntrack entry. A UDP client that keeps
talking from one source port (DNS, QUIC, game and media traffic) refreshes that entry forever, so
after a pod's IP changes or its node port is handed to another pod, its datagrams would keep going
to the old pod IP. Deleting the entries of the old target makes the next datagram take the new
rule. Only entries whose reply source is the old ``pod_ip:pod_port`` are deleted, so flows of
other mappings and of the node itself are never touched.

TCP is left alone on purpose: a new TCP connection starts a new entry (SYN) and meets the current
rule; deleting live entries would only cut connections to a pod that may still be serving them
(a Service opting out of NodePortLocal while its pods keep running).

Best effort: the ``conntrack`` tool (Debian package ``conntrack``) is used when installed; without
it a warning is logged once and rules still work (stale UDP flows then age out on their own).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from typing import Protocol

from podway.base.errors import PodwayError
from podway.programs.agent.types import Rule

log = logging.getLogger("podway.programs.agent.conntrack")

TOOL = "conntrack"
_NOTHING_DELETED = "0 flow entries have been deleted"


class Runner(Protocol):
    async def run(self, *args: str, stdin: str = "") -> str: ...


def delete_args(rule: Rule) -> tuple[str, ...]:
    """``conntrack`` arguments deleting the flows DNATed by ``rule``."""
    return (TOOL, "-D", "-p", rule.protocol, "--orig-port-dst", str(rule.node_port),
            "--reply-src", rule.pod_ip, "--reply-port-src", str(rule.pod_port))


class Conntrack:
    """Deletes conntrack entries of stale UDP mappings through ``runner`` (its namespace)."""

    def __init__(self, *, runner: Runner, available: bool | None = None) -> None:
        self.runner = runner
        # None: look for the tool on first use (it may be installed after start-up in tests).
        self._available = available
        self._warned = False

    async def forget(self, rules: Iterable[Rule]) -> None:
        stale = sorted(rule for rule in rules if rule.protocol == "udp")
        if not stale:
            return
        if self._available is None:
            self._available = shutil.which(TOOL) is not None
        if not self._available:
            if not self._warned:
                self._warned = True
                log.warning("event=conntrack-unavailable tool=%s effect=%s", TOOL,
                            "stale UDP flows keep their old pod until they time out")
            return
        for rule in stale:
            try:
                await self.runner.run(*delete_args(rule))
            except PodwayError as exc:
                if _NOTHING_DELETED in str(exc):
                    continue  # conntrack exits 1 when no entry matched: nothing was stale
                log.warning("event=conntrack-delete-failed rule=%s error=%s", rule, exc)
