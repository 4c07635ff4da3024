"""``podway vip l2``: L2 mode (``podway.programs.vip.l2``), with its group, VIPs, engine
health and placement given as flags or read live from the API (``l2_cluster``, ``metallb_l2``:
the Helm chart's DaemonSet)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from podway.base.errors import ConfigError
from podway.base.tasks import run_until_signal
from podway.cli.commands.common import check_at_least, setup_logging
from podway.cli.commands.vip import _healthy, vip_app


@vip_app.command()
def l2(
    node: Annotated[str, typer.Option(
        envvar="NODE_NAME", help="This host's name among its peers (its Node's name when "
        "anything is read from the API).")],
    interface: Annotated[str, typer.Option(
        help="The interface on the clients' segment: the VIPs go on it, announced there.")],
    listen: Annotated[str, typer.Option(
        help="Where this host hears its peers' heartbeats, ADDRESS:PORT.")],
    key_file: Annotated[Path, typer.Option(
        help="The key the group's heartbeats are signed with (≥ 16 bytes, the same file on "
             "every host; anyone with it can take the VIPs).")],
    peer: Annotated[list[str], typer.Option(
        "--peer", help="Another host of the group as NAME=ADDRESS:PORT (repeat).")
    ] = [],  # noqa: B006
    vip: Annotated[list[str], typer.Option("--vip", help="A VIP of the group (repeat).")
                   ] = [],  # noqa: B006
    peers_from_nodes: Annotated[str | None, typer.Option(
        help="The group is the Nodes this label selector picks, read live from the API (each "
        "at its InternalIP, the port of --listen), instead of --peer.")] = None,
    vips_from_services: Annotated[bool, typer.Option(
        "--vips-from-services", help="The VIPs are the addresses LoadBalancer Services hold "
        "(status.loadBalancer.ingress), read live from the API, instead of --vip.")] = False,
    pool: Annotated[list[str], typer.Option(
        "--pool", help="With --vips-from-services: only addresses in this CIDR, a-b range or "
        "address (repeat; none: every Service's).")] = [],  # noqa: B006
    engine_pods: Annotated[str | None, typer.Option(
        help="Own no VIP unless an engine pod this label selector picks runs on this Node, "
        "Ready and not being deleted (read live from the API).")] = None,
    engine_namespace: Annotated[str, typer.Option(
        envvar="POD_NAMESPACE", help="The namespace of --engine-pods.")] = "default",
    health_url: Annotated[str, typer.Option(
        help="Own no VIP while this does not answer 200: an HTTP URL, or unix:PATH of the "
             "engine's Envoy admin socket (its /ready).")] = "",
    interval: Annotated[float, typer.Option(help="Seconds between heartbeats.")] = 0.2,
    dead_after: Annotated[int, typer.Option(
        help="Missed heartbeats before a peer is taken for dead.")] = 3,
    hand_over_wait: Annotated[float, typer.Option(
        help="On stop, or when this host loses a VIP (its engine not ready, a newcomer owns "
        "it): at most this many seconds it keeps the VIP until the new owner holds it.")] = 1.0,
    quorum: Annotated[bool, typer.Option(
        "--quorum", help="Own nothing while hearing fewer than half of the peers (a split's "
        "minority side lets go; with 2 hosts a lone survivor owns nothing: 3 or more).")
    ] = False,
    arp_isolation: Annotated[bool, typer.Option(
        help="Set arp_ignore=1 and arp_announce=2 on the interfaces VIPs go on (put back on "
        "exit), so a host that keeps a VIP local elsewhere (IPVS, second chance) does not "
        "answer ARP for it.")] = True,
    from_metallb: Annotated[bool, typer.Option(
        "--from-metallb", help="Own a VIP only where MetalLB's L2Advertisements say: their "
        "nodeSelectors (this --node's labels) and interfaces, read live from the API.")] = False,
    metallb_namespace: Annotated[str, typer.Option(
        help="With --from-metallb: the namespace of MetalLB's objects.")] = "metallb-system",
    kubeconfig: Annotated[str | None, typer.Option(
        help="kubeconfig file (default: in-cluster).")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """L2 mode: one host of the group per VIP answers ARP/NDP for it, elected by rendezvous
    hashing over the hosts alive and healthy; it moves within a second of its owner failing,
    and is handed over first on SIGTERM."""
    from podway.programs.vip.l2 import L2Settings, L2Speaker, check_vips, parse_peer, read_key
    from podway.programs.vip.l2_cluster import ClusterOptions, check_pools, run_in_cluster

    setup_logging(log_level)
    check_at_least("--interval", interval, 0.05)
    check_at_least("--dead-after", dead_after, 2)
    check_at_least("--hand-over-wait", hand_over_wait, 0)
    _, address = parse_peer(f"{node}={listen}")
    peers = dict(parse_peer(p) for p in peer)
    if node in peers:
        raise ConfigError(f"--peer {node!r} is this host (--node)")
    _check_sources(peers, peers_from_nodes, vip, vips_from_services, pool, quorum)
    try:
        check_pools(pool)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    settings = L2Settings(node=node, interface=interface, listen=address, peers=peers,
                          vips=check_vips(vip) if vip else (), key=read_key(key_file),
                          interval_s=interval, dead_after=dead_after, hand_over_s=hand_over_wait,
                          placement={} if from_metallb else None,  # {}: none until read
                          quorum=quorum, arp_isolation=arp_isolation)
    speaker = L2Speaker(settings, (lambda: _healthy(health_url)) if health_url else None)
    if not (from_metallb or peers_from_nodes or vips_from_services or engine_pods):
        asyncio.run(run_until_signal(speaker.run()))
        return
    opts = ClusterOptions(node=node, port=address[1], ipv6=":" in address[0],
                          peer_selector=peers_from_nodes, vips_from_services=vips_from_services,
                          pools=tuple(pool), engine_selector=engine_pods,
                          engine_namespace=engine_namespace)
    asyncio.run(run_until_signal(run_in_cluster(
        speaker, opts, metallb_namespace=metallb_namespace if from_metallb else None,
        kubeconfig=kubeconfig)))


def _check_sources(peers: dict[str, tuple[str, int]], peers_from_nodes: str | None,
                   vips: list[str], vips_from_services: bool, pools: list[str],
                   quorum: bool) -> None:
    """One line for a group or VIP list given twice or not at all."""
    if peers and peers_from_nodes is not None:
        raise ConfigError("give --peer or --peers-from-nodes, not both")
    if vips and vips_from_services:
        raise ConfigError("give --vip or --vips-from-services, not both")
    if not vips and not vips_from_services:
        raise ConfigError("give at least one --vip (or --vips-from-services)")
    if pools and not vips_from_services:
        raise ConfigError("--pool needs --vips-from-services")
    if quorum and peers_from_nodes is None and len(peers) < 2:
        raise ConfigError("--quorum needs at least 2 --peer (3 hosts): with one peer a lone "
                          "survivor would own nothing")
