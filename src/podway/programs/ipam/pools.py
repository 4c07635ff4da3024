"""Address pools from configuration: CIDRs or ranges, IPv4 and IPv6, several pools.

A pool file (YAML or JSON) reads::

    pools:
    - name: public                 # unique; chosen by annotation podway.io/vip-pool
      addresses: [198.18.10.0/28, "198.18.20.5-198.18.20.9", "2001:db8:1::/120"]
      engineGroup: edge-a          # optional: objects of this engine group draw from it
      autoAssign: true             # false: only objects that name the pool draw from it

Invariants: pools are immutable values; a pool's addresses are enumerated lazily in the order
written (so a /64 costs nothing until used); an IPv4 CIDR of /30 or wider leaves out its network
and broadcast addresses (clients and routers treat them specially); no address is in two pools.
Every error is a ``ConfigError`` whose one line names the pool and the bad entry.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from podway.base.errors import ConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class AddressRange:
    """A closed range of addresses of one family (a CIDR is read as its usable hosts)."""

    first: IPAddress
    last: IPAddress

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
            return False
        return (address.version == self.first.version
                and int(self.first) <= int(address) <= int(self.last))

    def __iter__(self) -> Iterator[IPAddress]:
        current = int(self.first)
        cls = type(self.first)
        while current <= int(self.last):
            yield cls(current)
            current += 1

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def overlaps(self, other: AddressRange) -> bool:
        return (self.first.version == other.first.version
                and int(self.first) <= int(other.last) and int(other.first) <= int(self.last))

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    name: str
    ranges: tuple[AddressRange, ...]
    engine_group: str | None = None
    auto_assign: bool = True

    def __contains__(self, address: object) -> bool:
        return any(address in r for r in self.ranges)

    def addresses(self) -> Iterator[IPAddress]:
        for r in self.ranges:
            yield from r


def parse_range(text: str) -> AddressRange:
    """``198.18.0.0/28``, ``198.18.0.5-198.18.0.9``, ``2001:db8::/120`` or one address."""
    text = text.strip()
    try:
        if "-" in text:
            a, b = (ipaddress.ip_address(part.strip()) for part in text.split("-", 1))
            if a.version != b.version:
                raise ValueError("the two ends are of different families")
            if int(a) > int(b):
                raise ValueError("the first address is after the last")
            return AddressRange(a, b)
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as err:
        raise ValueError(f"{text!r} is not a CIDR, a range a-b or an address ({err})") from None
    first, last = net.network_address, net.broadcast_address
    if net.version == 4 and net.prefixlen <= 30:
        first, last = first + 1, last - 1
    return AddressRange(first, last)


def parse_pools(data: Any) -> tuple[Pool, ...]:
    """Pools from the decoded configuration document (see the module docstring)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("pools"), list):
        raise ConfigError("VIP pools: the document needs a list 'pools'")
    pools: list[Pool] = []
    for i, entry in enumerate(data["pools"]):
        where = f"VIP pools: pools[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} is not a mapping")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: 'name' must be a non-empty string")
        where = f"VIP pool {name!r}"
        addresses = entry.get("addresses")
        if not isinstance(addresses, list) or not addresses or not all(
                isinstance(a, str) for a in addresses):
            raise ConfigError(f"{where}: 'addresses' must be a non-empty list of strings")
        ranges = []
        for text in addresses:
            try:
                ranges.append(parse_range(text))
            except ValueError as err:
                raise ConfigError(f"{where}: {err}") from None
        group = entry.get("engineGroup")
        if group is not None and not isinstance(group, str):
            raise ConfigError(f"{where}: 'engineGroup' must be a string")
        auto = entry.get("autoAssign", True)
        if not isinstance(auto, bool):
            raise ConfigError(f"{where}: 'autoAssign' must be true or false")
        pools.append(Pool(name=name, ranges=tuple(ranges), engine_group=group or None,
                          auto_assign=auto))
    _check_distinct(pools)
    return tuple(pools)


def _check_distinct(pools: list[Pool]) -> None:
    seen: list[tuple[str, AddressRange]] = []
    names: set[str] = set()
    for pool in pools:
        if pool.name in names:
            raise ConfigError(f"VIP pools: the name {pool.name!r} is used twice")
        names.add(pool.name)
        for r in pool.ranges:
            for other_name, other in seen:
                if r.overlaps(other):
                    raise ConfigError(f"VIP pools: {r} of {pool.name!r} overlaps {other} of "
                                      f"{other_name!r}: an address belongs to one pool")
            seen.append((pool.name, r))


def load_pools(path: Path) -> tuple[Pool, ...]:
    """Pools from a YAML or JSON file; one-line ``ConfigError`` on any problem."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"VIP pools: cannot read {path}: {err.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"VIP pools: {path} does not parse: {first}") from None
    return parse_pools(data)
