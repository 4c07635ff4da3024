"""Kernel services → the nftables ruleset text (pure; tests compare it byte for byte).

    table ip podway_l4
      map vips   { ipv4_addr . inet_proto . inet_service : verdict }   VIP:port → its chain
      map ports  { inet_proto . inet_service : verdict }                "0.0.0.0" listeners
      chain s<i> (one per service)
        [meta mark set meta mark | SNAT_MARK]            unless transparent
        dnat ip to numgen inc mod N map @b<i>            or  jhash ip saddr mod N (ClientIP)
      map b<i>   { numgen slot interval : member ip . port }   weights are slot ranges
      chain prerouting / output   nat hooks: one vmap lookup per new flow
      chain postrouting           per-member connection counters (a flow's first packet);
                                  masquerade what carries SNAT_MARK (to the host's address)
      set vip_keys / port_keys    the keys of ``vips`` / ``ports``
      chain input                 drops a packet to a served port that conntrack calls invalid
                                  (a filter hook forwarded packets never enter: no cost to them)
      chain count                 only with ``traffic``: forward hook, per-member packet/byte
                                  counters (both ways; a lookup on every packet)

A NAT chain sees only the first packet of a flow; conntrack carries every later packet with the
translation chosen then, so a change affects new flows only: established flows keep their member
(a removed or draining member finishes what it has), and no packet sees a half-built table.

* ``full`` makes the table (the engine's first write): it deletes any table of that name and
  builds it whole, base chains included, in one transaction.
* ``update`` changes it in place: the table, its base chains (the hooks) and its maps stay.
  A first transaction adds the next generation's service chains and member maps (named
  ``s<i>_g<gen>``, ``b<i>_g<gen>``; nothing refers to them yet); a second, the switch,
  refills the maps to point at the new chains; a third deletes the previous generation. Member
  counters stay (they count from the member's first appearance).

Member accounting costs nothing per packet by default: each member's connections (conntrack
flows, UDP ones included) are counted in the ``postrouting`` NAT chain, which like every NAT
chain sees only a flow's first packet, by a named counter (``c_...``) that a map keyed by the
DNATed destination selects (``ct status dnat``: the engine host's own connections to a member,
its health checks, are not counted). Packets and bytes per member need a lookup on every
forwarded packet (measured: 0.48 us a request, docs/performance.md "Kernel L4 engine"), so
they come only with ``traffic`` (the engine's ``--member-traffic-counters``): the ``count``
chain on the forward hook and its counters (``m_...``).

Why: nf_tables picks a chain's rules by the generation current when the packet entered the hook,
but looks a set up in the generation current at the lookup. A packet crossing a commit can meet
a chain made in that commit (its rules for the old generation are empty) or a map whose
elements that commit deleted, and then leaves the hook without DNAT: it reached the host's own
stack and was refused. Replacing the table (``full``) does both, and so does an in-place change
in one transaction; measured in namespaces with changes back to back under two streams of new
connections (``bench/kernel_changes.py``): about one SYN in 2,000 to 8,000 changes un-DNATed that
way, and none in over 100,000 changes made in ``update``'s steps.

New flows go round the weight slots in turn (``numgen inc``), not at random: a few long-lived
connections (a client's pool, a benchmark's 16) split exactly by weight instead of, say, 4/12
over two members, where the busier member bounded the whole service (measured:
``bench/kernel_l4_cost.py``, docs/performance.md "Kernel L4 engine"). The counter is the rule's
and starts again with each change's new chain, so a change may restart the turn.

A service with no usable member is not DNATed: its packets reach the host's own stack, where
nothing listens on the VIP's port, so a TCP client is refused at once (reset) rather than left
hanging. Affinity hashes the client address with a fixed seed: a client keeps its member while
the member list stays; when it changes, most clients move (documented: docs/kernel.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from podway.kernel.plan import Backend, Service

TABLE = "podway_l4"
SNAT_MARK = 0x00400000  # a packet bit no other Podway part uses (Envoy 0x1000/0x2000, lab 0x4000)
HASH_SEED = 0x50570000  # fixed, so a restart keeps every ClientIP client on its member
# SNAT keeps the client's source port when it can (plain masquerade). Measured: forcing a port
# range (even one apart from the host's own ephemeral ports) remaps every flow, and the members
# then refuse ~4 % of SYNs by PAWS against their TIME_WAIT tuples (1 s stalls; 4,400 instead
# of 18,000 new connections/s in bench/kernel_l4.py; docs/kernel.md, "SNAT and TIME_WAIT").


CONNECTIONS, TRAFFIC = "c", "m"  # the prefixes of the two kinds of member counters


def counter_name(protocol: str, backend: Backend, kind: str = TRAFFIC) -> str:
    """The named counter of one member endpoint (shared by every service that uses it):
    ``kind`` CONNECTIONS (flows) or TRAFFIC (packets and bytes, both ways)."""
    return f"{kind}_{protocol}_{backend.address.replace('.', '_')}_{backend.port}"


def _elements(items: Iterable[str]) -> str:
    listed = ", ".join(items)
    return f" elements = {{ {listed} }};" if listed else ""


def _slots(backends: tuple[Backend, ...]) -> tuple[int, list[str]]:
    """(total slots, map elements ``first-last : ip . port``)."""
    at, out = 0, []
    for b in backends:
        last = at + b.weight - 1
        key = str(at) if last == at else f"{at}-{last}"
        out.append(f"{key} : {b.address} . {b.port}")
        at = last + 1
    return at, out


def names(index: int, gen: int) -> tuple[str, str]:
    """(service chain, member map) of service ``index`` in generation ``gen``."""
    tail = f"_g{gen}" if gen else ""
    return f"s{index}{tail}", f"b{index}{tail}"


def _service_lines(index: int, service: Service, gen: int = 0) -> list[str]:
    chain, bmap = names(index, gen)
    lines = [f"  chain {chain} {{"]
    comment = f' comment "{service.name}"'
    if not service.backends:
        lines.append(f"    counter{comment}")  # not DNATed: the host refuses it (docstring)
        lines.append("  }")
        return lines
    if not service.transparent:
        lines.append(f"    meta mark set meta mark | {SNAT_MARK:#010x}")
    proto = service.protocol
    if len(service.backends) == 1:
        b = service.backends[0]
        lines.append(f"    meta l4proto {proto} dnat ip to {b.address}:{b.port}{comment}")
    else:
        total, _ = _slots(service.backends)
        pick = (f"jhash ip saddr mod {total} seed {HASH_SEED:#x}" if service.affinity
                else f"numgen inc mod {total}")
        lines.append(f"    meta l4proto {proto} dnat ip to {pick} map @{bmap}{comment}")
    lines.append("  }")
    if len(service.backends) > 1:
        _, elements = _slots(service.backends)
        lines.append(f"  map {bmap} {{ typeof numgen inc mod 1 : ip daddr . {proto} dport; "
                     f"flags interval;{_elements(elements)} }}")
    return lines


def _counters(services: Iterable[Service]) -> list[tuple[str, str, int]]:
    return sorted({(s.protocol, b.address, b.port) for s in services for b in s.backends})


def _kinds(traffic: bool) -> tuple[str, ...]:
    return (CONNECTIONS, TRAFFIC) if traffic else (CONNECTIONS,)


def _counter_names(services: Iterable[Service], traffic: bool) -> list[str]:
    """Every member counter the table has for ``services``, in the order it declares them."""
    found = _counters(services)
    return [counter_name(p, Backend(a, port), kind) for kind in _kinds(traffic)
            for p, a, port in found]


COUNTER_MAPS = {CONNECTIONS: "member_connections", TRAFFIC: "member_counters"}


def _map_elements(services: tuple[Service, ...], gen: int, traffic: bool = False
                  ) -> dict[str, list[str]]:
    """The elements of the maps ``vips``, ``ports``, ``member_connections`` and (with
    ``traffic``) ``member_counters``."""
    vips = [f"{s.address} . {s.protocol} . {s.port} : goto {names(i, gen)[0]}"
            for i, s in enumerate(services) if s.address != "0.0.0.0"]
    ports = [f"{s.protocol} . {s.port} : goto {names(i, gen)[0]}"
             for i, s in enumerate(services) if s.address == "0.0.0.0"]
    out = {"vips": vips, "ports": ports}
    for kind in _kinds(traffic):
        out[COUNTER_MAPS[kind]] = [
            f"{a} . {p} . {port} : \"{counter_name(p, Backend(a, port), kind)}\""
            for p, a, port in _counters(services)]
    out["vip_keys"] = [key.split(" : ", 1)[0] for key in vips]
    out["port_keys"] = [key.split(" : ", 1)[0] for key in ports]
    return out


MAP_TYPES = {
    "vips": "type ipv4_addr . inet_proto . inet_service : verdict;",
    "ports": "type inet_proto . inet_service : verdict;",
    "member_connections": "type ipv4_addr . inet_proto . inet_service : counter;",
    "member_counters": "type ipv4_addr . inet_proto . inet_service : counter;",
}
# The keys of ``vips`` and ``ports`` again, as sets: a filter chain cannot look a key up in a
# verdict map whose chains NAT (the kernel refuses the rule), and ``input`` needs just the keys.
KEY_SETS = {
    "vip_keys": "type ipv4_addr . inet_proto . inet_service;",
    "port_keys": "type inet_proto . inet_service;",
}


def _maps(traffic: bool) -> list[str]:
    """Every map and key set the table has, in the order it declares them."""
    return [n for n in (*MAP_TYPES, *KEY_SETS) if traffic or n != COUNTER_MAPS[TRAFFIC]]


def _kind(name: str) -> str:
    return "set" if name in KEY_SETS else "map"


BASE_CHAINS = [
    "  chain prerouting {",
    "    type nat hook prerouting priority dstnat; policy accept;",
    "    ip daddr . meta l4proto . th dport vmap @vips",
    "    fib daddr type local meta l4proto . th dport vmap @ports",
    "  }",
    # The host itself: 127.0.0.0/8 is never DNATed (the source would stay loopback and be
    # dropped on the way out: the client would hang).
    "  chain output {",
    "    type nat hook output priority -100; policy accept;",
    "    ip daddr != 127.0.0.0/8 ip daddr . meta l4proto . th dport vmap @vips",
    "    ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport vmap @ports",
    "  }",
    # A NAT chain: only a flow's first packet passes (module docstring), so this counts
    # connections at no cost to later packets.
    "  chain postrouting {",
    "    type nat hook postrouting priority srcnat; policy accept;",
    "    ct status dnat counter name ip daddr . meta l4proto . th dport map @member_connections",
    f"    meta mark & {SNAT_MARK:#010x} == {SNAT_MARK:#010x} masquerade",
    "  }",
    # A packet of a served flow that conntrack calls invalid (say a late retransmission
    # outside the window) is not NATed: it would reach the host's own stack, which answers a
    # segment of a connection it does not know with a reset, and the client's live connection
    # to the member is torn down. Dropped instead, as the member would have ignored it. Only
    # packets for the host itself enter this hook: forwarded flows never pay for it.
    "  chain input {",
    "    type filter hook input priority filter; policy accept;",
    "    ct state invalid ip daddr . meta l4proto . th dport @vip_keys counter drop",
    "    ct state invalid meta l4proto . th dport @port_keys counter drop",
    "  }",
]
TRAFFIC_CHAIN = [  # only with ``traffic``: a lookup on every forwarded packet
    "  chain count {",
    "    type filter hook forward priority filter; policy accept;",
    "    ct status dnat ct direction original "
    "counter name ip daddr . meta l4proto . th dport map @member_counters",
    "    ct status dnat ct direction reply "
    "counter name ip saddr . meta l4proto . th sport map @member_counters",
    "  }",
]


def full(services: Iterable[Service], table: str = TABLE, gen: int = 0, *,
         traffic: bool = False) -> str:
    """Replace table ``ip <table>`` with one serving exactly ``services`` (one transaction);
    ``gen`` names the service chains and member maps (``names``); ``traffic`` adds the
    per-packet member counters (module docstring)."""
    services = tuple(services)
    lines = [f"table ip {table} {{}}", f"delete table ip {table}", f"table ip {table} {{"]
    lines += [f"  counter {name} {{}}" for name in _counter_names(services, traffic)]
    for name, elements in _map_elements(services, gen, traffic).items():
        declared = KEY_SETS.get(name) or MAP_TYPES[name]
        lines.append(f"  {_kind(name)} {name} {{ {declared}{_elements(elements)} }}")
    for index, service in enumerate(services):
        lines += _service_lines(index, service, gen)
    lines += BASE_CHAINS + (TRAFFIC_CHAIN if traffic else [])
    lines.append("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Installed:
    """What the table serves: ``live``, with chains and maps of generation ``gen``, and
    whether it has the per-packet member counters (``traffic``). ``full`` leaves
    ``Installed(services, traffic=traffic)``."""

    live: tuple[Service, ...]
    gen: int = 0
    traffic: bool = False


def update(installed: Installed, after: Iterable[Service], table: str = TABLE
           ) -> tuple[tuple[str, str, str], Installed]:
    """Change the table from ``installed`` to serving ``after``, in place, as three
    transactions in order (module docstring), and what it serves then.

    1. The next generation's chains, member maps and new members' counters: nothing refers to
       them yet, so no packet sees them.
    2. The switch: the maps point at the new chains (the change for traffic, atomic).
    3. The previous generation's chains and maps, and the counters of members gone, deleted:
       nothing refers to them any more.

    Why not one: the kernel picks a chain's rules by the generation current when a packet
    entered the hook, but looks a set up in the generation current at the lookup; a packet
    crossing a commit can thus meet a chain made in that very commit (its rules for the old
    generation are empty) or a map whose elements that commit deleted, and leave without
    DNAT. So a chain is referred to only once it has outlived one commit, and what the old
    generation used is deleted only after the commit that stopped using it."""
    after = tuple(after)
    gen = installed.gen + 1
    traffic = installed.traffic
    present = _counter_names(installed.live, traffic)
    wanted = _counter_names(after, traffic)
    prepare = [f"table ip {table} {{"]
    prepare += [f"  counter {name} {{}}" for name in wanted if name not in present]
    for index, service in enumerate(after):
        prepare += _service_lines(index, service, gen)
    prepare.append("}")
    switch = [f"flush {_kind(name)} ip {table} {name}" for name in _maps(traffic)]
    for name, elements in _map_elements(after, gen, traffic).items():
        if elements:
            switch.append(f"add element ip {table} {name} {{ {', '.join(elements)} }}")
    sweep = []
    for index, service in enumerate(installed.live):
        chain, bmap = names(index, installed.gen)
        sweep.append(f"delete chain ip {table} {chain}")
        if len(service.backends) > 1:
            sweep.append(f"delete map ip {table} {bmap}")
    sweep += [f"delete counter ip {table} {name}" for name in present if name not in wanted]

    def text(lines: list[str]) -> str:
        return "\n".join(lines) + "\n" if lines else ""

    return (text(prepare), text(switch), text(sweep)), Installed(after, gen, traffic)


def cleanup(table: str = TABLE) -> str:
    """Remove the table, whether or not it exists."""
    return f"table ip {table} {{}}\ndelete table ip {table}\n"
