"""MetalLB's BGP objects as one node's BIRD sessions: node selectors pick the peers, passwords
come from basic-auth Secrets, BFD profiles become per-session BFD, advertisements give each
peer its prefixes with their communities (aliases resolved) and local preference; what Podway
does not carry is a problem, never dropped in silence; the result parses in real BIRD."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.programs.vip.bird import BfdProfile, Export, engine_config
from podway.programs.vip.metallb import Objects, plan, seconds
from podway.programs.vip.metallb_live import parse_protocols
from tests.unit.programs.vip.test_configs import parses, runner

NS = "metallb-system"
NODE = {"kubernetes.io/hostname": "eng1", "rack": "a"}


def obj(kind: str, name: str, spec: dict[str, Any], **extra: Any) -> tuple[str, str, Any]:
    return kind, name, {"kind": kind, "metadata": {"name": name, "namespace": NS,
                                                   **extra.pop("meta", {})},
                        "spec": spec, **extra}


def objects(*items: tuple[str, str, Any]) -> Objects:
    out = Objects()
    for kind, name, raw in items:
        out.by_kind[kind][name] = raw
    return out


def secret(name: str, password: str, type_: str = "kubernetes.io/basic-auth"
           ) -> tuple[str, str, Any]:
    return "Secret", name, {"kind": "Secret", "type": type_, "metadata": {"name": name},
                            "data": {"password": base64.b64encode(password.encode()).decode()}}


POOL = obj("IPAddressPool", "public", {"addresses": ["198.18.60.0/28"]},
           meta={"labels": {"zone": "edge"}})
OTHER = obj("IPAddressPool", "private", {"addresses": ["198.18.61.1-198.18.61.2"]})
PEER_A = obj("BGPPeer", "rtr-a", {
    "myASN": 65001, "peerASN": 65000, "peerAddress": "198.18.51.1", "holdTime": "9s",
    "passwordSecret": {"name": "bgp-auth", "namespace": NS}, "bfdProfile": "fast",
    "nodeSelectors": [{"matchLabels": {"rack": "a"}}]})
PEER_B = obj("BGPPeer", "rtr.b", {"myASN": 65001, "peerASN": 65002, "peerAddress": "198.18.52.1",
                                  "peerPort": 1179})
PEER_ELSEWHERE = obj("BGPPeer", "rtr-c", {
    "myASN": 65001, "peerASN": 65003, "peerAddress": "198.18.53.1",
    "nodeSelectors": [{"matchLabels": {"rack": "b"}}]})
BFD = obj("BFDProfile", "fast", {"receiveInterval": 100, "transmitInterval": 150,
                                 "detectMultiplier": 4, "echoMode": True})
COMMUNITY = obj("Community", "aliases", {"communities": [{"name": "no-advertise",
                                                          "value": "65535:65282"}]})


def test_peers_passwords_bfd_and_advertisements_as_metallb_reads_them(tmp_path: Path) -> None:
    world = objects(POOL, OTHER, PEER_A, PEER_B, PEER_ELSEWHERE, BFD, COMMUNITY,
                    secret("bgp-auth", "s3cret"),
                    obj("BGPAdvertisement", "to-a", {
                        "ipAddressPoolSelectors": [{"matchLabels": {"zone": "edge"}}],
                        "peers": ["rtr-a"], "aggregationLength": 24, "localPref": 50,
                        "communities": ["no-advertise", "65001:7", "large:1:2:3"]}),
                    obj("BGPAdvertisement", "everywhere", {"ipAddressPools": ["private"]}))
    result = plan(world, node_labels=NODE, router_id="198.18.51.2", namespace=NS)
    peers = {n.name: n for n in result.settings.neighbors}
    assert set(peers) == {"peer_rtr_a", "peer_rtr_b"}  # rtr-c selects rack b
    a, b = peers["peer_rtr_a"], peers["peer_rtr_b"]
    assert (a.password, a.hold_time, a.keepalive, a.local_as) == ("s3cret", 9, 3, 65001)
    assert a.bfd == BfdProfile(receive_ms=100, transmit_ms=150, multiplier=4)
    assert (b.bfd, b.port, b.password) == (None, 1179, None)
    assert set(a.exports or ()) == {
        Export(prefixes=("198.18.61.1/32", "198.18.61.2/32")),
        Export(prefixes=("198.18.60.0/24",), communities=("1:2:3", "65001:7", "65535:65282"),
               local_pref=50)}
    assert b.exports == (Export(prefixes=("198.18.61.1/32", "198.18.61.2/32")),)
    assert set(result.vips) == {"198.18.60.0/24", "198.18.61.1/32", "198.18.61.2/32"}
    assert result.problems == ("BFDProfile 'fast' (peer 'rtr-a'): echoMode is not carried "
                               "(BIRD's BFD has no echo mode or TTL check)",)
    text = engine_config(result.settings, result.vips)
    assert 'password "s3cret";' in text
    assert "bfd { min rx interval 100 ms; min tx interval 150 ms; multiplier 4; passive no; };" \
        in text
    assert "neighbor 198.18.52.1 port 1179 as 65002;" in text
    assert "bgp_large_community.add((1,2,3));" in text
    parses("bird", text, tmp_path)


def test_unusable_objects_are_said_and_the_rest_goes_on() -> None:
    world = objects(
        POOL, secret("wrong-type", "x", type_="Opaque"),
        obj("BGPPeer", "vrf", {"myASN": 1, "peerASN": 2, "peerAddress": "198.18.1.1",
                               "vrf": "red"}),
        obj("BGPPeer", "no-secret", {"myASN": 1, "peerASN": 2, "peerAddress": "198.18.1.2",
                                     "passwordSecret": {"name": "missing"}}),
        obj("BGPPeer", "opaque", {"myASN": 1, "peerASN": 2, "peerAddress": "198.18.1.3",
                                  "passwordSecret": {"name": "wrong-type"}}),
        obj("BGPPeer", "bad-hold", {"myASN": 1, "peerASN": 2, "peerAddress": "198.18.1.4",
                                    "holdTime": "1s"}),
        obj("BGPPeer", "good", {"myASN": 1, "peerASN": 2, "peerAddress": "198.18.1.5",
                                "routerID": "10.0.0.1"}),
        obj("BGPAdvertisement", "bad", {"nodeSelectors": "rack=a"}))
    result = plan(world, node_labels=NODE, router_id="198.18.51.2", namespace=NS)
    assert [n.name for n in result.settings.neighbors] == ["peer_good"]
    said = "\n".join(result.problems)
    for expected in ("BGPPeer 'vrf' is not used: vrf is not supported",
                     "BGPPeer 'no-secret' is not used: Secret 'missing' is not there",
                     "'wrong-type' must be of type kubernetes.io/basic-auth",
                     "BGPPeer 'bad-hold' is not used: BGP neighbour peer_bad_hold: hold time",
                     "BGPPeer 'good': routerID is taken from --router-id",
                     "BGPAdvertisement 'bad' is not used"):
        assert expected in said
    # No advertisement that selects this node: the session is up, nothing is announced.
    assert result.vips == ()
    assert engine_config(result.settings, result.vips).count("export none;") == 1


def test_given_vips_are_announced_by_their_pool() -> None:
    world = objects(POOL, OTHER, PEER_B, obj("BGPAdvertisement", "public",
                                             {"ipAddressPools": ["public"]}))
    result = plan(world, node_labels=NODE, router_id="198.18.51.2", namespace=NS,
                  vips=["198.18.60.3", "198.18.61.1", "198.18.99.1"])
    assert result.vips == ("198.18.60.3/32",)


def test_durations() -> None:
    assert [seconds(d) for d in ("90s", "1m30s", "3m", "1h", "2.5s")] == [90, 90, 180, 3600, 2]


def test_session_states_from_birdc() -> None:
    text = """BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     05:27:55.123
peer_a     BGP        ---        up     05:27:56.001  Established
peer_b     BGP        ---        start  2026-12-04 23:01:02  Active  Socket: Connection refused
peer_c     BGP        ---        start  05:27:56.001  Connect
"""
    sessions = parse_protocols(text)
    assert [(s.name, s.state, s.info, s.established) for s in sessions] == [
        ("peer_a", "up", "Established", True),
        ("peer_b", "start", "Active Socket: Connection refused", False),
        ("peer_c", "start", "Connect", False)]


def test_the_command_refuses_bad_flags_in_one_line() -> None:
    for flags, said in ((["--router-id", "2001:db8::1"], "must be an IPv4 address"),
                        (["--router-id", "198.18.0.1", "--vip", "nope"], "'nope' is not an IP")):
        bad = runner.invoke(app, ["vip", "announce-metallb", "--node", "eng1", *flags])
        assert isinstance(bad.exception, ConfigError)
        assert said in str(bad.exception)


async def test_a_configuration_bird_refuses_keeps_the_last_one(tmp_path: Path) -> None:
    """BIRD refusing a new configuration is logged; the speaker keeps running the last one and
    its file says so again (no crash that would withdraw everything)."""
    from podway.base.errors import EnvironmentProblem
    from podway.programs.vip.metallb_live import MetalLBSpeaker

    class Refusing:
        def __init__(self, settings: Any) -> None:
            self.settings, self.vips, self.rewritten = settings, (), None

        async def announce(self, vips: Any) -> None:
            raise EnvironmentProblem("bird refused the configuration: syntax error")

        def rewrite(self, vips: Any) -> None:
            self.rewritten = tuple(vips)

    live = MetalLBSpeaker(None, namespace=NS, node="eng1",  # type: ignore[arg-type]
                          router_id="198.18.51.2", workdir=tmp_path)
    last = live.speaker.settings
    live.speaker = Refusing(last)  # type: ignore[assignment]
    live.objects = objects(POOL, PEER_B, obj("BGPAdvertisement", "all", {}))
    await live.apply()
    assert live.speaker.settings is last
    assert live.speaker.rewritten == ()  # type: ignore[attr-defined]
    assert live.applied == 0


def test_session_reports_name_the_bgppeer_with_bgp_and_bfd_states() -> None:
    from podway.programs.vip.metallb_live import Session
    from podway.programs.vip.metallb_sessions import SessionMetrics, parse_bfd, reports

    world = objects(POOL, PEER_A, PEER_B, BFD, secret("bgp-auth", "s3cret"))
    result = plan(world, node_labels=NODE, router_id="198.18.51.2", namespace=NS)
    bfd = parse_bfd("""BIRD 2.0.12 ready.
bfd1:
IP address                Interface  State      Since         Interval  Timeout
198.18.51.1               eth1       Up         05:27:56.001    0.100    0.500
""")
    assert bfd == {"198.18.51.1": "Up"}
    found = reports(result, [Session(name="peer_rtr_a", state="up", info="Established")], bfd)
    assert [(r.peer, r.address, r.bgp, r.bfd) for r in found] == [
        ("rtr-a", "198.18.51.1", "Established", "Up"),
        ("rtr.b", "198.18.52.1", "Idle", "N/A")]  # not in BIRD (yet): Idle; no profile: N/A
    metrics = SessionMetrics()
    metrics.update(found, 3)
    text = metrics.render().decode()
    assert 'podway_vip_bgp_session_established{address="198.18.51.1",peer="rtr-a"} 1.0' in text
    assert 'podway_vip_bgp_session_established{address="198.18.52.1",peer="rtr.b"} 0.0' in text
    assert "podway_vip_bgp_announced_routes 3.0" in text
    metrics.update(found[:1], 3)
    assert "rtr.b" not in metrics.render().decode()
