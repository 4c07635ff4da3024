"""ARP isolation of the interfaces an L2 speaker puts VIPs on: ``arp_ignore=1`` and
``arp_announce=2``, as a production L2 speaker needs them.

Linux answers an ARP request arriving on an interface for *any* address local to the host
(``arp_ignore=0``), and may put any local address in the sender field of the ARP requests it
sends there (``arp_announce=0``). A VIP is local on hosts that do not own it whenever something
else keeps it there — kube-proxy in IPVS mode (every LoadBalancer address on ``kube-ipvs0``),
second chance (``docs/vips.md``: the VIPs local on both hosts), the VRRP recipe's ``lo`` — and
then every such host answers ARP for the VIP on the clients' segment, or teaches the clients
its MAC for it with its own requests: the clients' traffic goes to a host that is not the
owner. With ``arp_ignore=1`` the interface answers only for addresses configured on it (the
owner's VIP is, by ``podway vip l2``), and with ``arp_announce=2`` its requests name its own
address on that subnet. This is MetalLB's "strictARP" and the LVS direct-routing recipe, held
to the interfaces the speaker uses (``all`` is left alone: other interfaces are not ours).

IPv6 needs nothing: Linux answers Neighbor Solicitations only for addresses on the interface
they arrive on.

Every host of the group sets them (owners and the others alike) before it claims anything,
keeps the values it found, and puts them back when it exits. A value already at least as strict
is left as it is (nothing to restore): the Helm chart sets them in a privileged init container,
because a container that is not privileged sees ``/proc/sys`` read-only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

WANTED = {"arp_ignore": 1, "arp_announce": 2}


@dataclass(slots=True)
class ArpIsolation:
    """Sets ``WANTED`` on interfaces as they come into use; ``restore`` puts back what it
    changed. ``root``: the sysctl tree (``/proc/sys/net/ipv4/conf``; tests give their own)."""

    root: Path = Path("/proc/sys/net/ipv4/conf")
    changed: dict[tuple[str, str], str] = field(default_factory=dict)  # → the value found
    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)

    def ensure(self, interface: str) -> bool:
        """``interface`` answers ARP only for its own addresses now; False (and a warning, once)
        when it could not be set."""
        if interface in self.done:
            return True
        try:
            for name, value in WANTED.items():
                path = self.root / interface / name
                found = path.read_text().strip()
                if int(found) >= value:
                    continue
                path.write_text(f"{value}\n")
                self.changed[(interface, name)] = found
        except (OSError, ValueError) as err:
            if interface not in self.failed:
                self.failed.add(interface)
                log.warning("l2: cannot set arp_ignore=1/arp_announce=2 on %s (%s): a host "
                            "that keeps the VIPs local elsewhere (IPVS, second chance) would "
                            "answer ARP for them there too", interface,
                            getattr(err, "strerror", None) or err)
            return False
        self.done.add(interface)
        return True

    def restore(self) -> None:
        """Put back every value this changed (each interface that still exists)."""
        for (interface, name), value in sorted(self.changed.items()):
            try:
                (self.root / interface / name).write_text(f"{value}\n")
            except OSError as err:
                log.warning("l2: cannot restore %s of %s: %s", name, interface,
                            err.strerror or err)
        self.changed.clear()
        self.done.clear()
