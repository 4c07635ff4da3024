"""Pool configuration: CIDRs, ranges and single addresses of both families; every mistake is one
line that names the pool."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.programs.ipam import load_pools, parse_pools, parse_range


def test_ipv4_cidr_leaves_out_network_and_broadcast() -> None:
    """A /29 gives its six hosts, in order."""
    r = parse_range("198.18.0.0/29")
    assert [str(a) for a in r] == [f"198.18.0.{i}" for i in range(1, 7)]


def test_ipv6_cidr_and_range_and_single_address() -> None:
    """IPv6 CIDRs keep every address; a-b ranges and one address are ranges too."""
    assert parse_range("2001:db8::/126").size == 4
    assert [str(a) for a in parse_range("198.18.1.5-198.18.1.7")] == [
        "198.18.1.5", "198.18.1.6", "198.18.1.7"]
    assert parse_range("198.18.1.9").size == 1


def test_huge_ipv6_pool_is_lazy() -> None:
    """A /64 is enumerated on demand: the first address comes at once."""
    pools = parse_pools({"pools": [{"name": "v6", "addresses": ["2001:db8::/64"]}]})
    assert next(pools[0].addresses()) == ipaddress.ip_address("2001:db8::")


@pytest.mark.parametrize(("doc", "message"), [
    ({}, "needs a list 'pools'"),
    ({"pools": [{"addresses": ["198.18.0.0/30"]}]}, "'name' must be"),
    ({"pools": [{"name": "a", "addresses": []}]}, "non-empty list"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.1/24"]}]}, "VIP pool 'a': '198.18.0.1/24'"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.9-198.18.0.1"]}]}, "after the last"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.1-2001:db8::1"]}]}, "different families"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.1"], "autoAssign": "yes"}]},
     "'autoAssign' must be true or false"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.0/28"]},
                {"name": "b", "addresses": ["198.18.0.8-198.18.0.20"]}]}, "overlaps"),
    ({"pools": [{"name": "a", "addresses": ["198.18.0.1"]},
                {"name": "a", "addresses": ["198.18.0.2"]}]}, "used twice"),
])
def test_bad_configuration_is_one_clear_line(doc: object, message: str) -> None:
    """Each mistake is a ConfigError of one line that says what is wrong."""
    with pytest.raises(ConfigError) as err:
        parse_pools(doc)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_load_pools_reads_yaml_and_reports_bad_files(tmp_path: Path) -> None:
    """A YAML file loads; a missing or unparsable one is one line naming the file."""
    good = tmp_path / "pools.yaml"
    good.write_text("pools:\n- name: p\n  addresses: [198.18.0.0/30]\n  engineGroup: edge\n")
    (pool,) = load_pools(good)
    assert pool.engine_group == "edge"
    assert pool.ranges[0].size == 2
    with pytest.raises(ConfigError, match="cannot read"):
        load_pools(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [\n")
    with pytest.raises(ConfigError, match="does not parse"):
        load_pools(bad)
