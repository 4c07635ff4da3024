"""When the kernel takes packets for an address an L2 speaker just added.

An IPv4 address is usable when ``ip addr add`` returns (its local route goes in with it). An
IPv6 one, even ``nodad``, only once the kernel's address work has run: that work puts in the
address's local route, and it waits for the RTNL lock, which every network change of every
namespace takes — on a busy host 0.2 s after ``ip addr add`` returned, and more. Packets that
arrive before are dropped (with forwarding off, silently), so the speaker announces a VIP, and
says it holds it, only once its local route is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time

from podway.base.children import run_command

log = logging.getLogger(__name__)


async def usable(vip: str, interface: str, *, within_s: float = 5.0) -> None:
    """Wait until the kernel takes packets for ``vip`` on ``interface``, before announcing it
    or saying we hold it. An IPv4 address is usable when ``ip addr add`` returns; an IPv6 one
    (even ``nodad``) only once the kernel's address work has run and put in its local route,
    which waits for the global RTNL lock: on a busy host 0.2 s later and more. A client sent
    there by an earlier announcement lost its SYN meanwhile (connect timed out), and the old
    owner let go too soon. Past ``within_s``: a warning, and go on (the address is there)."""
    if ":" not in vip:
        return
    deadline = time.monotonic() + within_s
    while not await local_route(vip, interface):
        if time.monotonic() >= deadline:
            log.warning("l2: %s on %s has no local route after %.1f s", vip, interface,
                        within_s)
            return
        await asyncio.sleep(0.005)


async def local_route(vip: str, interface: str) -> bool:
    _, out, _ = await run_command(
        "ip", "-6", "route", "show", "table", "local", f"{vip}/128", "dev", interface,
        stderr=asyncio.subprocess.DEVNULL)
    return has_local_route(out.decode(errors="replace"), vip)


def has_local_route(listing: str, vip: str) -> bool:
    """``ip -6 route show table local`` lists ``vip``'s local route."""
    want = ipaddress.ip_address(vip)
    for line in listing.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "local":
            with contextlib.suppress(ValueError):
                if ipaddress.ip_address(words[1].split("/")[0]) == want:
                    return True
    return False
