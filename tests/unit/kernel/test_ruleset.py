"""``podway.kernel.ruleset``'s member accounting: connections per member at a flow's first
packet (a NAT chain), packets and bytes (a lookup on every forwarded packet) only when asked."""

from __future__ import annotations

import re
from dataclasses import replace

from podway.kernel.plan import Backend, Service
from podway.kernel.ruleset import Installed, full, update

WEB = Service(name="service/shop/web/80/tcp", address="198.18.0.10", port=80, protocol="tcp",
              affinity=False, transparent=False, pools=("p",),
              backends=(Backend("198.18.1.2", 8080), Backend("198.18.2.2", 8080)))


def chain(text: str, name: str) -> str:
    """The body of chain ``name`` in a ruleset text."""
    found = re.search(rf"  chain {name} {{\n(.*?)\n  }}", text, re.S)
    assert found, text
    return found.group(1)


def test_by_default_no_rule_runs_on_every_forwarded_packet() -> None:
    """The default table hooks only NAT chains (a flow's first packet) and the input filter
    (packets for the host itself: forwarded ones never enter it): no forward-hook chain, no
    packet/byte counters, and each member's connection counter counted in postrouting for
    DNATed flows, before the masquerade."""
    text = full((WEB,))
    hooks = re.findall(r"type (\w+) hook (\w+)", text)
    assert hooks == [("nat", "prerouting"), ("nat", "output"), ("nat", "postrouting"),
                     ("filter", "input")], hooks
    assert "m_" not in text, text
    assert "member_counters" not in text, text
    assert "counter c_tcp_198_18_1_2_8080 {}" in text, text
    assert "counter c_tcp_198_18_2_2_8080 {}" in text, text
    assert '198.18.1.2 . tcp . 8080 : "c_tcp_198_18_1_2_8080"' in text
    post = chain(text, "postrouting").splitlines()
    assert post[1].strip() == ("ct status dnat counter name ip daddr . meta l4proto . th dport "
                               "map @member_connections"), post
    assert post[2].strip().endswith("masquerade"), post


def test_traffic_counters_add_the_forward_chain_beside_the_connection_counters() -> None:
    text = full((WEB,), traffic=True)
    assert "type filter hook forward" in chain(text, "count")
    assert "counter m_tcp_198_18_2_2_8080 {}" in text
    assert '198.18.2.2 . tcp . 8080 : "m_tcp_198_18_2_2_8080"' in text
    assert "@member_connections" in chain(text, "postrouting")


def test_in_place_changes_keep_the_tables_kind_of_accounting() -> None:
    """A member leaving and a new one coming: its counters of each kind the table has are made
    before the switch, refilled in it and deleted after; a default table never gets the
    traffic map or counters, a traffic table keeps them."""
    after = (replace(WEB, backends=(Backend("198.18.1.2", 8080), Backend("198.18.5.2", 8080))),)
    (prepare, switch, sweep), holds = update(Installed((WEB,)), after)
    assert holds.traffic is False
    assert "counter c_tcp_198_18_5_2_8080 {}" in prepare
    assert "m_" not in prepare
    assert "flush map ip podway_l4 member_connections" in switch
    assert "member_counters" not in switch + prepare + sweep
    assert "delete counter ip podway_l4 c_tcp_198_18_2_2_8080" in sweep
    assert "c_tcp_198_18_1_2_8080" not in prepare + sweep  # kept: it counts on
    (prepare, switch, sweep), holds = update(Installed((WEB,), traffic=True), after)
    assert holds.traffic is True
    assert {"counter c_tcp_198_18_5_2_8080 {}", "counter m_tcp_198_18_5_2_8080 {}"} <= {
        line.strip() for line in prepare.splitlines()}
    assert "flush map ip podway_l4 member_counters" in switch
    assert '"m_tcp_198_18_5_2_8080"' in switch
    assert "delete counter ip podway_l4 m_tcp_198_18_2_2_8080" in sweep
