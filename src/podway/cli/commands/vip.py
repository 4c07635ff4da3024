"""``podway vip``: VIP reachability with proven speakers (see ``docs/vips.md``).

``bird-config`` and ``keepalived-config`` write the speakers' configuration for the VIPs an
engine host serves; ``announce`` runs BIRD for one engine host, withdraws while the engine is
unhealthy and, on SIGTERM, withdraws first and waits before exiting (stop it before Envoy:
traffic leaves, then Envoy drains); ``second-chance`` hands the packets of flows this host does
not know to its peer while it runs, so a peer that withdrew keeps its open connections while it
drains (``podway.programs.vip.secondchance``); ``check`` is a health probe for keepalived's track
script.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from podway.base.errors import ConfigError
from podway.base.tasks import run_until_signal
from podway.cli.commands.common import check_at_least, setup_logging
from podway.programs.vip.bird import BgpSettings, check_settings, engine_config, parse_neighbor

vip_app = typer.Typer(name="vip", help="VIP reachability: BGP (BIRD 2) or VRRP (keepalived).",
                      no_args_is_help=True)

VipOpt = Annotated[list[str], typer.Option("--vip", help="A VIP this host serves (repeat).")]
Output = Annotated[Path | None, typer.Option(help="Write here (atomically) instead of stdout.")]
RouterId = Annotated[str, typer.Option(help="BGP router id: this host's IPv4 address.")]
LocalAs = Annotated[int, typer.Option(help="This host's AS number.")]
NeighborOpt = Annotated[list[str], typer.Option(
    "--neighbor", help="A BGP peer as ADDRESS:AS, e.g. 198.18.51.1:65000 (repeat).")]
Bfd = Annotated[bool, typer.Option(help="BFD on every session (sub-second failure detection).")]
BfdMs = Annotated[int, typer.Option(help="BFD interval in ms (down after 3 missed).")]
Hold = Annotated[int, typer.Option(help="BGP hold time in seconds (min 3).")]
Keepalive = Annotated[int, typer.Option(help="BGP keepalive in seconds.")]
Communities = Annotated[list[str], typer.Option(
    "--community", help="Add this community to the announcements: ASN:VALUE, or ASN:VALUE:VALUE "
    "for a large one (repeat).")]
LocalPref = Annotated[int | None, typer.Option(help="BGP LOCAL_PREF of the announcements.")]
AggLength = Annotated[int, typer.Option(
    help="Announce each IPv4 VIP as its covering prefix of this length (32: the address).")]
AggLengthV6 = Annotated[int, typer.Option(
    help="The same for IPv6 (128: the address).")]
PasswordFile = Annotated[Path | None, typer.Option(
    help="TCP MD5 password of every BGP session, read from this file.")]


@dataclass(frozen=True, slots=True)
class Announcement:
    """What every announcement carries (the flags of bird-config and announce)."""

    communities: tuple[str, ...] = ()
    local_pref: int | None = None
    aggregation_length: int = 32
    aggregation_length_v6: int = 128
    password_file: Path | None = None

    def apply(self, settings: BgpSettings) -> BgpSettings:
        password = None
        if self.password_file is not None:
            try:
                password = self.password_file.read_text().strip()
            except OSError as err:
                raise ConfigError(f"--password-file {self.password_file}: "
                                  f"{err.strerror or err}") from None
        return replace(settings, communities=self.communities, local_pref=self.local_pref,
                       aggregation_length=self.aggregation_length,
                       aggregation_length_v6=self.aggregation_length_v6, password=password)


def register(app: typer.Typer) -> None:
    app.add_typer(vip_app)


def _bgp(router_id: str, local_as: int, neighbors: list[str], bfd: bool, bfd_interval_ms: int,
         hold_time: int, keepalive: int, announcement: Announcement = Announcement()
         ) -> BgpSettings:
    settings = announcement.apply(BgpSettings(
        router_id=router_id, local_as=local_as,
        neighbors=tuple(parse_neighbor(n) for n in neighbors), bfd=bfd,
        bfd_interval_ms=bfd_interval_ms, hold_time=hold_time, keepalive=keepalive))
    check_settings(settings)
    return settings


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(output)
    except OSError as err:
        raise ConfigError(f"--output {output}: {err.strerror}") from None


@vip_app.command("bird-config")
def bird_config(
    router_id: RouterId, local_as: LocalAs, neighbor: NeighborOpt, vip: VipOpt = [],  # noqa: B006
    bfd: Bfd = True, bfd_interval_ms: BfdMs = 100, hold_time: Hold = 3,
    keepalive: Keepalive = 1, output: Output = None,
    community: Communities = [], local_pref: LocalPref = None,  # noqa: B006
    aggregation_length: AggLength = 32, aggregation_length_v6: AggLengthV6 = 128,
    password_file: PasswordFile = None,
) -> None:
    """BIRD 2 configuration announcing the VIPs to the neighbours (no --vip: withdraw all).
    Apply with `birdc configure`."""
    settings = _bgp(router_id, local_as, neighbor, bfd, bfd_interval_ms, hold_time, keepalive,
                    Announcement(tuple(community), local_pref, aggregation_length,
                                 aggregation_length_v6, password_file))
    _emit(engine_config(settings, vip), output)


@vip_app.command("keepalived-config")
def keepalived_config(
    interface: Annotated[str, typer.Option(help="Interface on the shared L2 segment.")],
    router_id: Annotated[int, typer.Option(help="VRRP virtual router id (1-255), same on "
                                                "every host of the group.")],
    vip: VipOpt,
    priority: Annotated[int, typer.Option(help="1-254; the highest alive host owns the VIPs.")
                        ] = 100,
    advert: Annotated[float, typer.Option(help="Advertisement interval in seconds.")] = 0.1,
    peer: Annotated[list[str], typer.Option(
        "--peer", help="Unicast peer address (repeat; default multicast).")] = [],  # noqa: B006
    check: Annotated[str, typer.Option(help="Health command; failing takes this host out.")
                     ] = "",
    output: Output = None,
) -> None:
    """keepalived configuration owning the VIPs on INTERFACE (VRRP v3)."""
    from podway.programs.vip.keepalived import VrrpSettings, config

    _emit(config(VrrpSettings(interface=interface, router_id=router_id, priority=priority,
                              advert_s=advert, peers=tuple(peer), check=check), vip), output)


@vip_app.command()
def announce(
    router_id: RouterId, local_as: LocalAs, neighbor: NeighborOpt, vip: VipOpt,
    workdir: Annotated[Path, typer.Option(help="BIRD's config and control socket.")
                       ] = Path("/run/podway-bird"),
    health_url: Annotated[str, typer.Option(
        help="Withdraw while this does not answer 200: an HTTP URL, or unix:PATH of the "
             "engine's Envoy admin socket (its /ready).")] = "",
    withdraw_wait: Annotated[float, typer.Option(
        help="On stop: seconds between the withdrawal and exiting.")] = 2.0,
    bfd: Bfd = True, bfd_interval_ms: BfdMs = 100, hold_time: Hold = 3,
    keepalive: Keepalive = 1,
    community: Communities = [], local_pref: LocalPref = None,  # noqa: B006
    aggregation_length: AggLength = 32, aggregation_length_v6: AggLengthV6 = 128,
    password_file: PasswordFile = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run BIRD announcing the VIPs; withdraw while unhealthy; on SIGTERM withdraw, wait, exit."""
    from podway.programs.vip.speaker import BirdSpeaker, follow_health

    setup_logging(log_level)
    check_at_least("--withdraw-wait", withdraw_wait, 0)
    settings = _bgp(router_id, local_as, neighbor, bfd, bfd_interval_ms, hold_time, keepalive,
                    Announcement(tuple(community), local_pref, aggregation_length,
                                 aggregation_length_v6, password_file))
    speaker = BirdSpeaker(settings, workdir=workdir)

    async def main() -> None:
        await speaker.start(vip if not health_url else [])
        try:
            if health_url:
                await follow_health(speaker, vip, lambda: _healthy(health_url))
            else:
                await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(speaker.announce([]))
                await asyncio.shield(asyncio.sleep(withdraw_wait))
            await speaker.stop()

    asyncio.run(run_until_signal(main()))


@vip_app.command("announce-metallb")
def announce_metallb(
    node: Annotated[str, typer.Option(envvar="NODE_NAME", help="This host's Node (its labels "
                                      "meet the BGPPeers' and BGPAdvertisements' nodeSelectors).")],
    router_id: RouterId,
    metallb_namespace: Annotated[str, typer.Option(
        help="The namespace of MetalLB's objects (and of the password Secrets).")
    ] = "metallb-system",
    vip: Annotated[list[str], typer.Option(
        "--vip", help="Announce only these VIPs, each under its IPAddressPool's "
        "advertisements (repeat; none: each advertised pool's own addresses).")] = [],  # noqa: B006
    workdir: Annotated[Path, typer.Option(help="BIRD's config and control socket.")
                       ] = Path("/run/podway-bird"),
    kubeconfig: Annotated[str | None, typer.Option(
        help="kubeconfig file (default: the in-cluster service account).")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    health_url: Annotated[str, typer.Option(
        help="Withdraw while this does not answer 200 (HTTP URL or unix:PATH of the engine's "
             "Envoy admin socket).")] = "",
    withdraw_wait: Annotated[float, typer.Option(
        help="On stop: seconds between the withdrawal and exiting.")] = 2.0,
    metrics_address: Annotated[str, typer.Option(help="Address of /metrics.")] = "127.0.0.1",
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics (0: none).")] = 0,
    session_states: Annotated[bool, typer.Option(
        help="Write MetalLB's BGPSessionState objects (one per peer of this node) and this "
             "node's entry of each VIPPeer's status.")] = True,
    metallb: Annotated[bool, typer.Option(
        "--metallb/--no-metallb", help="Read MetalLB's kinds too; --no-metallb: only Podway's "
        "VIPPeer, VIPAdvertisement and VIPPool (password Secrets in --metallb-namespace).")
    ] = True,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """BGP as MetalLB's objects say (BGPPeer, BGPAdvertisement, Community, BFDProfile,
    IPAddressPool, password Secrets), read live from the API; BIRD is reconfigured on every
    change without resetting the other sessions; on SIGTERM withdraw, wait, exit."""
    from podway.programs.vip.bird import host_routes
    from podway.programs.vip.metallb_main import Options, main

    setup_logging(log_level)
    check_at_least("--withdraw-wait", withdraw_wait, 0)
    check_settings(BgpSettings(router_id=router_id, local_as=1, neighbors=(), bfd=False,
                               require_neighbors=False))
    host_routes(vip)  # one line for a VIP that is not an address or a CIDR
    opts = Options(node=node, router_id=router_id, namespace=metallb_namespace,
                   vips=tuple(vip) or None, workdir=workdir, kubeconfig=kubeconfig,
                   context=context, withdraw_wait=withdraw_wait, metrics_address=metrics_address,
                   metrics_port=metrics_port, session_states=session_states,
                   metallb=metallb)
    healthy = (lambda: _healthy(health_url)) if health_url else None
    asyncio.run(run_until_signal(main(opts, healthy)))


async def _healthy(url: str) -> bool:
    """``url`` answers 200: an HTTP URL, or ``unix:/path`` to an engine's Envoy admin socket
    (its ``/ready``: the configuration is applied)."""
    if url.startswith("unix:"):
        from podway.envoy.engine.admin import is_ready

        return await is_ready(url)
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session, \
                session.get(url) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


@vip_app.command("second-chance")
def second_chance(
    local: Annotated[str, typer.Option(help="This host's IPv4 address (the tunnel's source).")],
    vip: VipOpt,
    peer: Annotated[str, typer.Option(
        help="The peer engine host's IPv4 address (or give the pair with --pair).")] = "",
    pair: Annotated[list[str], typer.Option(
        "--pair", help="Both hosts of the pair (twice): the peer is the one that is not "
             "--local (one setting for both hosts, e.g. a Helm chart).")] = [],  # noqa: B006
    port: Annotated[list[int], typer.Option(
        "--port", help="A TCP port the VIPs serve (repeat; none: every port).")] = [],  # noqa: B006
    peer_url: Annotated[str, typer.Option(
        help="Hand flows over only while this HTTP URL on the peer host answers 200 (a dead "
             "peer's flows then get a reset at once); empty: always.")] = "",
    device: Annotated[str, typer.Option(help="The VXLAN device.")] = "pw-sc",
    vni: Annotated[int, typer.Option(help="VXLAN network identifier.")] = 5150,
    udp_port: Annotated[int, typer.Option(help="VXLAN UDP port between the hosts.")] = 4789,
    mss: Annotated[int, typer.Option(
        help="MSS the VIPs announce (fits VXLAN in a 1500-byte path); 0: no clamp.")] = 1410,
    remove: Annotated[bool, typer.Option(
        "--remove", help="Remove what an earlier run left (after a crash) and exit.")] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Hand packets of TCP flows this host does not know to the peer (VXLAN) until stopped;
    install before the engine serves, remove on SIGTERM."""
    from podway.programs.vip.secondchance import (
        SecondChance,
        SecondChanceHost,
        check,
        follow_peer,
        peer_of,
    )

    setup_logging(log_level)
    peer = peer_of(local, peer, pair)
    settings = SecondChance(vips=tuple(vip), ports=tuple(port), local=local, peer=peer,
                            device=device, vni=vni, udp_port=udp_port, mss=mss)
    check(settings)
    host = SecondChanceHost(settings)
    if remove:
        asyncio.run(host.remove())
        return

    async def main() -> None:
        await host.install()
        try:
            if peer_url:
                await follow_peer(host, lambda: _healthy(peer_url))
            else:
                await asyncio.Event().wait()
        finally:
            await asyncio.shield(host.remove())

    asyncio.run(run_until_signal(main()))


@vip_app.command("check")
def check_command(url: Annotated[str, typer.Option(
        help="HTTP URL, or unix:PATH of an engine's Envoy admin socket.")]) -> None:
    """Exit 0 when URL answers 200 (unix:PATH: Envoy is ready), else 1 (for keepalived's
    track script)."""
    ok = asyncio.run(_healthy(url))
    raise typer.Exit(0 if ok else 1)


# `podway vip l2` lives in its own module (its flags are many); importing it registers it.
from podway.cli.commands import vip_l2  # noqa: E402,F401
