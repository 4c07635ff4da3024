"""Kernel services → the nftables ruleset text (pure; tests compare it byte for byte).

    table ip podway_l4
      map vips   { ipv4_addr . inet_proto . inet_service : verdict }   VIP:port → its chain
      map ports  { inet_proto . inet_service : verdict }                "0.0.0.0" listeners
      chain s<i> (one per service)
        [meta mark set meta mark | SNAT_MARK]            unless transparent
        dnat ip to numgen inc mod N map @b<i>            or  jhash ip saddr mod N (ClientIP)
      map b<i>   { numgen slot interval : member ip . port }   weights are slot ranges
      chain prerouting / output   nat hooks: one vmap lookup per new flow
      chain postrouting           masquerade what carries SNAT_MARK (to the host's address)
      chain count                 forward hook: per-member packet/byte counters (both ways)

A NAT chain sees only the first packet of a flow; conntrack carries every later packet with the
translation chosen then. So a whole-table replacement in one transaction (``full``) changes
members, weights and VIPs for new flows only: established flows keep their member (a removed
or draining member finishes what it has), and no packet sees a half-built table.

New flows go round the weight slots in turn (``numgen inc``), not at random: a few long-lived
connections (a client's pool, a benchmark's 16) split exactly by weight instead of, say, 4/12
over two members, where the busier member bounded the whole service (measured:
``bench/kernel_l4_cost.py``, docs/performance.md "Kernel L4 engine"). The counter is the rule's
and starts again at each table replacement, so a change may restart the turn.

A service with no usable member is not DNATed: its packets reach the host's own stack, where
nothing listens on the VIP's port, so a TCP client is refused at once (reset) rather than left
hanging. Affinity hashes the client address with a fixed seed: a client keeps its member while
the member list stays; when it changes, most clients move (documented: docs/kernel.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from podway.kernel.plan import Backend, Service

TABLE = "podway_l4"
SNAT_MARK = 0x00400000  # a packet bit no other Podway part uses (Envoy 0x1000/0x2000, lab 0x4000)
HASH_SEED = 0x50570000  # fixed, so a restart keeps every ClientIP client on its member
# SNAT keeps the client's source port when it can (plain masquerade). Measured: forcing a port
# range (even one apart from the host's own ephemeral ports) remaps every flow, and the members
# then refuse ~4 % of SYNs by PAWS against their TIME_WAIT tuples (1 s stalls; 4,400 instead
# of 18,000 new connections/s in bench/kernel_l4.py; docs/kernel.md, "SNAT and TIME_WAIT").


def counter_name(protocol: str, backend: Backend) -> str:
    """The named counter of one member endpoint (shared by every service that uses it)."""
    return f"m_{protocol}_{backend.address.replace('.', '_')}_{backend.port}"


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


def _service_lines(index: int, service: Service) -> list[str]:
    lines = [f"  chain s{index} {{"]
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
        lines.append(f"    meta l4proto {proto} dnat ip to {pick} map @b{index}{comment}")
    lines.append("  }")
    if len(service.backends) > 1:
        _, elements = _slots(service.backends)
        lines.append(f"  map b{index} {{ typeof numgen inc mod 1 : ip daddr . {proto} dport; "
                     f"flags interval;{_elements(elements)} }}")
    return lines


def full(services: Iterable[Service], table: str = TABLE) -> str:
    """Replace table ``ip <table>`` with one serving exactly ``services`` (one transaction)."""
    services = tuple(services)
    lines = [f"table ip {table} {{}}", f"delete table ip {table}", f"table ip {table} {{"]
    counters = sorted({(s.protocol, b.address, b.port) for s in services for b in s.backends})
    for proto, address, port in counters:
        lines.append(f"  counter {counter_name(proto, Backend(address, port))} {{}}")
    vips = [f"{s.address} . {s.protocol} . {s.port} : goto s{i}"
            for i, s in enumerate(services) if s.address != "0.0.0.0"]
    ports = [f"{s.protocol} . {s.port} : goto s{i}"
             for i, s in enumerate(services) if s.address == "0.0.0.0"]
    lines.append("  map vips { type ipv4_addr . inet_proto . inet_service : verdict;"
                 f"{_elements(vips)} }}")
    lines.append(f"  map ports {{ type inet_proto . inet_service : verdict;{_elements(ports)} }}")
    members = [f"{a} . {p} . {port} : \"{counter_name(p, Backend(a, port))}\""
               for p, a, port in counters]
    lines.append("  map member_counters { type ipv4_addr . inet_proto . inet_service : counter;"
                 f"{_elements(members)} }}")
    for index, service in enumerate(services):
        lines += _service_lines(index, service)
    lines += [
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
        "  chain postrouting {",
        "    type nat hook postrouting priority srcnat; policy accept;",
        f"    meta mark & {SNAT_MARK:#010x} == {SNAT_MARK:#010x} masquerade",
        "  }",
        "  chain count {",
        "    type filter hook forward priority filter; policy accept;",
        "    ct status dnat ct direction original "
        "counter name ip daddr . meta l4proto . th dport map @member_counters",
        "    ct status dnat ct direction reply "
        "counter name ip saddr . meta l4proto . th sport map @member_counters",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def cleanup(table: str = TABLE) -> str:
    """Remove the table, whether or not it exists."""
    return f"table ip {table} {{}}\ndelete table ip {table}\n"
