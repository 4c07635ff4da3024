"""The engine host's side of transparent L4 listeners: connection marks and policy routing.

A transparent listener (``Listener.transparent``) connects to the pods from the client's own
address. The pods' replies are addressed to the client, so the network must bring them back to
the engine host (docs/reference.md, "Transparent L4"); there, these rules hand them to the
engine's socket instead of forwarding them on towards the client. They touch only connections
the engine opened transparently (their mark), so they are harmless on any engine host.
"""

from __future__ import annotations

from podway.envoy.config.listeners import ORIGINAL_SOURCE_MARK, REPLY_MARK, REPLY_TABLE

TABLE = "podway_transparent"


def rules(table: str = TABLE) -> tuple[str, list[list[str]]]:
    """What an engine host needs for transparent listeners: an nftables ruleset (``nft -f``)
    and ``ip`` commands (policy routing).

    A transparent TCP connection's packets carry ``ORIGINAL_SOURCE_MARK`` (the original-source
    filter sets it on the socket); the UDP proxy sets no mark, so a UDP packet the host sends
    from an address that is not its own is recognised by that instead. Either way the
    connection remembers the mark (conntrack mark), and its replies — addressed to the client,
    which is not a local address — are marked ``REPLY_MARK`` on arrival and routed by
    ``REPLY_TABLE`` to the local stack, where the engine's socket takes them. The engine's own
    packets never carry ``REPLY_MARK``, so they are routed normally.
    """
    nft = (f"table ip {table} {{\n"
           "  chain output {\n"
           "    type route hook output priority mangle; policy accept;\n"
           f"    meta mark {ORIGINAL_SOURCE_MARK:#x} ct mark set {ORIGINAL_SOURCE_MARK:#x}\n"
           f"    meta l4proto udp fib saddr type != local ct mark set {ORIGINAL_SOURCE_MARK:#x}\n"
           "  }\n"
           "  chain prerouting {\n"
           "    type filter hook prerouting priority mangle; policy accept;\n"
           f"    ct direction reply ct mark {ORIGINAL_SOURCE_MARK:#x} "
           f"meta mark set {REPLY_MARK:#x}\n"
           "  }\n"
           "}\n")
    ip = [["rule", "add", "fwmark", f"{REPLY_MARK:#x}", "lookup", str(REPLY_TABLE)],
          ["route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", str(REPLY_TABLE)]]
    return nft, ip
