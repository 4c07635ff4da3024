"""VIP reachability with proven speakers: Podway writes their configuration, they do the
protocol. ``bird`` (BGP, BIRD 2: ECMP over several engine hosts, BFD for fast failure
detection), ``keepalived`` (VRRP on one L2 segment), ``speaker`` (run BIRD for one engine host
and withdraw before a drain), ``secondchance`` (nftables, policy routing and VXLAN: a host
hands packets of flows it does not know to its peer, so a graceful stop fails nothing). See
``docs/vips.md``.
"""
