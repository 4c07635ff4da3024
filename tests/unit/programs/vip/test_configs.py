"""Speaker configuration: the exact statements that make BGP announce (and withdraw) the VIPs
and VRRP own them, checked by the real parsers (``bird -p``, ``keepalived -t``) when they are
installed; bad settings are one line; the health follower withdraws and re-announces."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.cli.commands import register
from podway.programs.vip import keepalived
from podway.programs.vip.bird import (
    BgpSettings,
    Neighbor,
    engine_config,
    parse_neighbor,
    router_config,
)
from podway.programs.vip.speaker import BirdSpeaker, follow_health

register(app)
runner = CliRunner()
ENGINE = BgpSettings(router_id="198.18.51.2", local_as=65001,
                     neighbors=(Neighbor(address="198.18.51.1", asn=65000),))


def parses(tool: str, text: str, tmp_path: Path) -> None:
    """The real tool accepts ``text`` (skipped where the tool is not installed)."""
    if shutil.which(tool) is None:
        return
    conf = tmp_path / f"{tool}.conf"
    conf.write_text(text)
    argv = ["bird", "-p", "-c", str(conf)] if tool == "bird" else ["keepalived", "-t", "-f",
                                                                    str(conf)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_engine_config_announces_host_routes_to_each_neighbour(tmp_path: Path) -> None:
    """Each VIP is one host route, sorted, exported only over BGP, with BFD and short
    timers; BIRD parses it."""
    text = engine_config(ENGINE, ["198.18.60.2", "198.18.60.1", "2001:db8::7"])
    assert "route 198.18.60.1/32 blackhole;\n    route 198.18.60.2/32 blackhole;" in text
    assert "route 2001:db8::7/128 blackhole;" in text
    assert "neighbor 198.18.51.1 as 65000;" in text
    assert "bfd on;" in text
    assert "hold time 3;" in text
    assert "import none;" in text
    assert "protocol kernel" not in text  # the VIPs never enter the engine host's table
    parses("bird", text, tmp_path)


def test_a_pool_is_announced_as_one_prefix_and_expanded_for_vrrp(tmp_path: Path) -> None:
    """BGP announces a pool CIDR as it is; VRRP owns each of its addresses."""
    text = engine_config(ENGINE, ["198.18.60.0/30"])
    assert "route 198.18.60.0/30 blackhole;" in text
    parses("bird", text, tmp_path)
    vrrp = keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=1),
                             ["198.18.70.0/30"])
    assert [line.split()[0] for line in vrrp.splitlines() if "dev eth0" in line] == [
        f"198.18.70.{i}/32" for i in range(4)]


def test_no_vips_withdraws_everything(tmp_path: Path) -> None:
    """The same sessions with no routes: a reconfigure withdraws without a session reset."""
    text = engine_config(ENGINE, [])
    assert "route " not in text
    assert "protocol bgp peer0" in text
    parses("bird", text, tmp_path)


def test_router_config_merges_paths_for_ecmp(tmp_path: Path) -> None:
    """The router side installs VIPs as multipath routes and accepts only host routes."""
    router = BgpSettings(router_id="198.18.51.1", local_as=65000, bfd=False, neighbors=(
        Neighbor(address="198.18.51.2", asn=65001), Neighbor(address="198.18.52.2", asn=65002)))
    text = router_config(router)
    assert text.count("merge paths on;") == 2
    assert "net.len >= 24" in text
    assert "bfd" not in text
    parses("bird", text, tmp_path)


def test_keepalived_config_owns_the_vips(tmp_path: Path) -> None:
    """One VRRP v3 instance per family, nopreempt, sub-second adverts, the optional health
    check tracked; keepalived accepts it."""
    s = keepalived.VrrpSettings(interface="eth0", router_id=51, priority=150, advert_s=0.1,
                                peers=("198.18.70.12",), check="/bin/true")
    text = keepalived.config(s, ["198.18.70.100", "2001:db8::64"])
    assert "vrrp_version 3" in text
    assert "198.18.70.100/32 dev eth0" in text
    assert "2001:db8::64/128 dev eth0" in text
    assert text.count("nopreempt") == 2
    assert "advert_int 0.1" in text
    assert "unicast_peer {\n        198.18.70.12" in text
    assert "track_script" in text
    parses("keepalived", text, tmp_path)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: engine_config(BgpSettings(router_id="2001:db8::1", local_as=1,
                                       neighbors=ENGINE.neighbors), []), "must be an IPv4"),
    (lambda: engine_config(BgpSettings(router_id="198.18.0.1", local_as=1, neighbors=()), []),
     "at least one BGP neighbour"),
    (lambda: engine_config(BgpSettings(router_id="198.18.0.1", local_as=1, hold_time=3,
                                       keepalive=2, neighbors=ENGINE.neighbors), []),
     "keepalive at most a third"),
    (lambda: engine_config(ENGINE, ["198.18.0.300"]), "is not an IP address"),
    (lambda: engine_config(ENGINE, ["198.18.0.1/24"]), "or a CIDR"),
    (lambda: keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=1),
                               ["198.18.0.0/16"]), "at most 256"),
    (lambda: parse_neighbor("198.18.0.1"), "give ADDRESS:AS"),
    (lambda: parse_neighbor("198.18.0.1:0"), "AS number"),
    (lambda: keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=0), ["1.2.3.4"]),
     "router id 0"),
    (lambda: keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=1,
                                                       advert_s=0.123), ["198.18.0.1"]),
     "0.01 s steps"),
    (lambda: keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=1,
                                                       check='a"b'), ["198.18.0.1"]), "quotes"),
    (lambda: keepalived.config(keepalived.VrrpSettings(interface="eth0", router_id=1), []),
     "at least one VIP"),
])
def test_bad_settings_are_one_line(make: object, message: str) -> None:
    """Every refusal is one ConfigError line that names the setting."""
    with pytest.raises(ConfigError) as err:
        make()  # type: ignore[operator]
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_writes_the_configs(tmp_path: Path) -> None:
    """`podway vip bird-config` / `keepalived-config` write the files; a bad flag is a
    ConfigError."""
    out = tmp_path / "bird.conf"
    done = runner.invoke(app, ["vip", "bird-config", "--router-id", "198.18.51.2", "--local-as",
                               "65001", "--neighbor", "198.18.51.1:65000", "--vip",
                               "198.18.60.1", "--output", str(out)])
    assert done.exit_code == 0, done.output
    assert "route 198.18.60.1/32 blackhole;" in out.read_text()
    done = runner.invoke(app, ["vip", "keepalived-config", "--interface", "eth0", "--router-id",
                               "7", "--vip", "198.18.70.100"])
    assert done.exit_code == 0, done.output
    assert "virtual_router_id 7" in done.output
    bad = runner.invoke(app, ["vip", "bird-config", "--router-id", "198.18.51.2", "--local-as",
                              "65001", "--neighbor", "nope"])
    assert isinstance(bad.exception, ConfigError)  # podway.cli.app.main: one line, exit status 2
    assert "give ADDRESS:AS" in str(bad.exception)


class FakeSpeaker:
    def __init__(self) -> None:
        self.vips: tuple[str, ...] = ("198.18.60.1",)
        self.calls: list[tuple[str, ...]] = []

    async def announce(self, vips: Sequence[str]) -> None:
        self.vips = tuple(vips)
        self.calls.append(self.vips)


async def test_health_follower_withdraws_after_fall_and_returns_after_rise() -> None:
    """Two failed checks withdraw, two good ones announce again; one blip changes nothing."""
    answers = iter([True, False, True, False, False, True, True, False])
    speaker = FakeSpeaker()
    done = asyncio.Event()

    async def healthy() -> bool:
        try:
            return next(answers)
        except StopIteration:
            done.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable") from None

    task = asyncio.create_task(follow_health(speaker, ["198.18.60.1"], healthy,  # type: ignore[arg-type]
                                             interval=0))
    await done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert speaker.calls == [(), ("198.18.60.1",)]


async def test_health_check_reads_the_engine_admin_socket(tmp_path: Path) -> None:
    """`unix:PATH` asks Envoy's admin /ready over the engine's socket: 200 is healthy, 503
    or no socket is not."""
    from podway.cli.commands.vip import _healthy

    answer = {"status": b"200 OK"}

    async def admin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        assert request.startswith(b"GET /ready ")
        writer.write(b"HTTP/1.1 " + answer["status"] + b"\r\nContent-Length: 5\r\n\r\nLIVE\n")
        await writer.drain()
        writer.close()

    sock = tmp_path / "admin.sock"
    server = await asyncio.start_unix_server(admin, path=str(sock))
    async with server:
        assert await _healthy(f"unix:{sock}") is True
        answer["status"] = b"503 Service Unavailable"
        assert await _healthy(f"unix:{sock}") is False
    assert await _healthy(f"unix:{tmp_path / 'missing.sock'}") is False


def test_announcements_carry_metallb_s_bgp_attributes(tmp_path: Path) -> None:
    """Communities (standard and large), LOCAL_PREF, aggregation to a covering prefix and a
    session password, as MetalLB's BGPAdvertisement and BGPPeer set them; BIRD parses it."""
    settings = replace(ENGINE, communities=("65535:65282", "64500:1:2"), local_pref=150,
                       aggregation_length=24, password="s3cret")
    text = engine_config(settings, ["198.18.60.1", "198.18.60.9", "198.18.61.1"])
    assert "route 198.18.60.0/24 blackhole;\n    route 198.18.61.0/24 blackhole;" in text
    assert "bgp_community.add((65535,65282));" in text
    assert "bgp_large_community.add((64500,1,2));" in text
    assert "bgp_local_pref = 150;" in text
    assert 'password "s3cret";' in text
    parses("bird", text, tmp_path)
    for bad, message in ((replace(ENGINE, communities=("65536:1",)), "community '65536:1'"),
                         (replace(ENGINE, aggregation_length=0), "aggregation length"),
                         (replace(ENGINE, password='a"b'), "BGP password")):
        with pytest.raises(ConfigError, match=message):
            engine_config(bad, ["198.18.60.1"])


def test_cli_reads_the_password_from_a_file_and_the_speaker_writes_it_0600(
        tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    done = runner.invoke(app, ["vip", "bird-config", "--router-id", "198.18.51.2", "--local-as",
                               "65001", "--neighbor", "198.18.51.1:65000", "--vip",
                               "198.18.60.1", "--password-file", str(secret), "--community",
                               "65000:100", "--local-pref", "200"])
    assert done.exit_code == 0, done.output
    assert 'password "s3cret";' in done.output
    assert "bgp_local_pref = 200;" in done.output
    speaker = BirdSpeaker(replace(ENGINE, password="s3cret"), workdir=tmp_path)
    speaker._write(["198.18.60.1"])
    assert (tmp_path / "bird.conf").stat().st_mode & 0o777 == 0o600
