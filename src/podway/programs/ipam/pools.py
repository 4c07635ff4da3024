"""Address pools from configuration: CIDRs or ranges, IPv4 and IPv6, several pools.

A pool file (YAML or JSON) reads::

    pools:
    - name: public                 # unique; chosen by annotation podway.io/vip-pool
      addresses: [198.18.10.0/28, "198.18.20.5-198.18.20.9", "2001:db8:1::/120"]
      engineGroup: edge-a          # optional: objects of this engine group draw from it
      autoAssign: true             # false: only objects that name the pool draw from it
      avoidBuggyIPs: false         # true: never hand out IPv4 addresses ending in .0 or .255
      serviceAllocation:           # optional, as MetalLB's IPAddressPool: who may draw from it
        priority: 10               # lower first; 0 (unset) last
        namespaces: [shop]         # or namespaceSelectors: [{matchLabels: {…}}]
        serviceSelectors: [{matchLabels: {tier: public}}]

The same pools come from ``VIPPool`` objects (and MetalLB's ``IPAddressPool``): see
``podway.programs.ipam.objects``.

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
from pydantic import ValidationError

from podway.base.errors import ConfigError
from podway.model.gateway import LabelSelector

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
class Scope:
    """Who may draw from a pool (MetalLB's ``serviceAllocation``): an object in one of
    ``namespaces`` or in a namespace one of ``namespace_selectors`` selects (neither given: any
    namespace), whose labels one of ``service_selectors`` selects (none given: any)."""

    namespaces: frozenset[str] = frozenset()
    namespace_selectors: tuple[LabelSelector, ...] = ()
    service_selectors: tuple[LabelSelector, ...] = ()

    def allows(self, namespace: str, namespace_labels: Mapping[str, str],
               labels: Mapping[str, str]) -> bool:
        if (self.namespaces or self.namespace_selectors) and namespace not in self.namespaces \
                and not any(s.matches(dict(namespace_labels)) for s in self.namespace_selectors):
            return False
        return not self.service_selectors or any(s.matches(dict(labels))
                                                 for s in self.service_selectors)


ANYONE = Scope()


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    name: str
    ranges: tuple[AddressRange, ...]
    engine_group: str | None = None
    auto_assign: bool = True
    avoid_buggy_ips: bool = False
    priority: int = 0  # lower is tried first; 0: last
    scope: Scope = ANYONE

    def __contains__(self, address: object) -> bool:
        return any(address in r for r in self.ranges)

    def addresses(self) -> Iterator[IPAddress]:
        for r in self.ranges:
            for address in r:
                if self.usable(address):
                    yield address

    def usable(self, address: IPAddress) -> bool:
        """False for an IPv4 address ending in .0 or .255 when the pool avoids them."""
        return not (self.avoid_buggy_ips and address.version == 4
                    and int(address) & 0xFF in (0, 255))

    @property
    def rank(self) -> int:
        """Pools are tried by priority (1 first, 0 last), then in the order they were read
        (the file's, then pool objects oldest first): sort stably by this."""
        return self.priority or 1 << 31


def parse_range(text: str, *, whole_cidrs: bool = False) -> AddressRange:
    """``198.18.0.0/28``, ``198.18.0.5-198.18.0.9``, ``2001:db8::/120`` or one address;
    ``whole_cidrs``: an IPv4 CIDR keeps its network and broadcast addresses (MetalLB's rule)."""
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
    if net.version == 4 and net.prefixlen <= 30 and not whole_cidrs:
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
        try:
            pools.append(pool_of(name, entry))
        except ValueError as err:
            raise ConfigError(f"VIP pool {name!r}: {err}") from None
    _check_distinct(pools)
    return tuple(pools)


def pool_of(name: str, spec: Mapping[str, Any], *, whole_cidrs: bool = False) -> Pool:
    """One pool from its fields (the file's entry or a pool object's ``spec``, camelCase);
    ValueError naming the field on any bad value. ``whole_cidrs``: see ``parse_range``."""
    addresses = spec.get("addresses")
    if not isinstance(addresses, list | tuple) or not addresses or not all(
            isinstance(a, str) for a in addresses):
        raise ValueError("'addresses' must be a non-empty list of strings")
    ranges = tuple(parse_range(text, whole_cidrs=whole_cidrs) for text in addresses)
    for key in ("engineGroup",):
        if spec.get(key) is not None and not isinstance(spec.get(key), str):
            raise ValueError(f"{key!r} must be a string")
    flags = {key: spec.get(key, default) for key, default in
             (("autoAssign", True), ("avoidBuggyIPs", False))}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{key!r} must be true or false")
    priority, scope = _allocation(spec.get("serviceAllocation"))
    return Pool(name=name, ranges=ranges, engine_group=spec.get("engineGroup") or None,
                auto_assign=flags["autoAssign"], avoid_buggy_ips=flags["avoidBuggyIPs"],
                priority=priority, scope=scope)


def _allocation(raw: Any) -> tuple[int, Scope]:
    """``serviceAllocation`` as (priority, scope)."""
    if raw is None:
        return 0, ANYONE
    if not isinstance(raw, Mapping):
        raise ValueError("'serviceAllocation' must be a mapping")
    priority = raw.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
        raise ValueError("'serviceAllocation.priority' must be a whole number ≥ 0")
    namespaces = raw.get("namespaces") or []
    if not isinstance(namespaces, list | tuple) or not all(isinstance(n, str)
                                                          for n in namespaces):
        raise ValueError("'serviceAllocation.namespaces' must be a list of names")
    selectors = {}
    for key in ("namespaceSelectors", "serviceSelectors"):
        try:
            selectors[key] = tuple(LabelSelector.model_validate(s)
                                   for s in raw.get(key) or [])
        except (ValidationError, TypeError) as err:
            raise ValueError(f"'serviceAllocation.{key}' is not a list of label selectors "
                             f"({_first_error(err)})") from None
    return priority, Scope(namespaces=frozenset(namespaces),
                           namespace_selectors=selectors["namespaceSelectors"],
                           service_selectors=selectors["serviceSelectors"])


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError) and err.errors():
        first = err.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(err)


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
