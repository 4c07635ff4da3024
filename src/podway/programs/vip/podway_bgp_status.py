"""Each ``VIPPeer``'s session state on this engine host, in the peer's own status: one entry
per node under ``status.nodes`` (``kubectl get vippeer x -o yaml`` shows every host's session),
written with a JSON merge patch so each host touches only its own key.

An entry says the BGP state as BIRD reports it (``session``: Established, Active, …), the BFD
state (N/A without BFD), the peer's address and ``established`` (true/false). It is written
only when it changed; when this host no longer has the session (the peer is deleted or its node
selectors leave the host out) the entry is removed. A peer deleted meanwhile is not an error.

``status.established`` sums the entries up as ``established/hosts`` (``2/3``), the column
``kubectl get vippeers`` prints: each host writes it with its own entry, counted from the
object as read, and the write carries that ``resourceVersion``, so two hosts writing at once
cannot leave a count that misses one of them (the loser of the race reads again).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kubernetes_asyncio import client

from podway.kube.errors import ApiError, Conflict, NotFound, api_error
from podway.model.kinds import BY_NAME
from podway.programs.vip.metallb_sessions import Report
from podway.programs.vip.podway_bgp import PREFIX

log = logging.getLogger(__name__)
_KIND = BY_NAME["VIPPeer"]
_TRIES = 5  # tries when other hosts write at the same moment (the next change tries again)


def entry(report: Report) -> dict[str, Any]:
    """One node's entry of a VIPPeer's ``status.nodes``."""
    return {"session": report.bgp, "established": report.established, "bfd": report.bfd,
            "address": report.address}


class PeerStatus:
    """Writes this node's entry in each ``VIPPeer``'s status (module docstring)."""

    def __init__(self, api: client.ApiClient, *, node: str) -> None:
        self._api: Any = client.CustomObjectsApi(api)  # _content_type is not in its stubs
        self.node = node
        self.written: dict[str, dict[str, Any]] = {}  # VIPPeer name → entry written
        self.patches = 0  # status writes made (for tests)

    async def write(self, found: Sequence[Report]) -> None:
        """The entries of the Podway peers among ``found`` that changed; the entries of peers
        this host no longer has, removed."""
        now = {r.peer.removeprefix(PREFIX): entry(r) for r in found
               if r.peer.startswith(PREFIX)}
        for name, value in now.items():
            if self.written.get(name) != value:
                await self._patch(name, value)
        for name in set(self.written) - set(now):
            await self._patch(name, None)

    async def _patch(self, name: str, value: dict[str, Any] | None) -> None:
        for _ in range(_TRIES):
            try:
                found = await self._api.get_cluster_custom_object(
                    _KIND.group, _KIND.versions[0], _KIND.plural, name)
                await self._api.patch_cluster_custom_object_status(
                    _KIND.group, _KIND.versions[0], _KIND.plural, name,
                    self._body(found, value), _content_type="application/merge-patch+json")
                self.patches += 1
                break
            except client.exceptions.ApiException as exc:
                err: ApiError = api_error(exc)
                if isinstance(err, Conflict):
                    continue  # another host wrote meanwhile: count again
                if not isinstance(err, NotFound):
                    log.warning("event=vip-peer-status-not-written peer=%s error=%s", name, err)
                    return
                break
        else:
            log.warning("event=vip-peer-status-not-written peer=%s error=conflicts", name)
            return
        if value is None:
            self.written.pop(name, None)
        else:
            self.written[name] = value

    def _body(self, found: dict[str, Any], value: dict[str, Any] | None) -> dict[str, Any]:
        """This host's entry, and the summary counted with it, if ``found`` is still current."""
        nodes = dict((found.get("status") or {}).get("nodes") or {})
        nodes.pop(self.node, None)
        if value is not None:
            nodes[self.node] = value
        return {"metadata": {"resourceVersion": (found.get("metadata") or {})
                             .get("resourceVersion")},
                "status": {"nodes": {self.node: value}, "established": summary(nodes)}}


def summary(nodes: dict[str, Any]) -> str:
    """``established/hosts`` over a VIPPeer's ``status.nodes``."""
    up = sum(1 for e in nodes.values() if isinstance(e, dict) and e.get("established") is True)
    return f"{up}/{len(nodes)}"
