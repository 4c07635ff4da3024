"""Route configurations (RDS): one per HTTP(S) listener, named after the listener; an HTTPS
listener with ``sni_host_check`` also has one per SNI filter chain (``<listener>/sni/<cert>``)
in which the hosts of the other chains answer 421.

Invariants the IR relies on and how they map to Envoy:

* Virtual hosts arrive in precedence order and routes within one are first-match already; Envoy
  keeps both orders, so we never sort here.
* ``PathKind.PREFIX`` is element-wise: ``path_separated_prefix`` (``/foo`` matches ``/foo`` and
  ``/foo/bar``, never ``/foobar``); ``/`` stays a plain ``prefix``.
* ``WildcardMode.ONE_LABEL`` (Ingress ``*.foo.com``): Envoy's wildcard domain covers any number of
  labels, so every route of such a host also requires ``:authority`` to match one label. A host
  with more labels falls through to the listener's catch-all (``*``) routes, which are appended to
  the wildcard host because Envoy never tries a second virtual host.
* A ``WeightedPool``'s own header filters (Gateway API backendRef filters) go on its weighted
  cluster entry, so they apply to the requests that share gets; such a route always uses
  ``weighted_clusters``, even with one share.
* The tables of a listener with ``real_ip`` set ``X-Real-IP`` to the client address
  (``listeners``: trusted hops); others carry no per-request formatter and drop a
  client-sent ``X-Real-IP`` (a pod must never get a forged one).
* A ``WeightedPool`` without a pool (an unresolvable backend) is answered with its ``status``.
  Envoy's weighted clusters cannot answer directly, so the share becomes a route of its own,
  selected by ``runtime_fraction`` ahead of the forwarding route (docs/design/invalid-backends.md).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2

from podway.envoy.config.listeners import sni_tables
from podway.envoy.config.route_entries import (
    PersistenceByPool,
    envoy_routes,
    one_label_authority,
    retry_connect_failures,
)
from podway.ir import (
    Listener,
    VirtualHost,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.ir.hosts import covers, host_order

Sni = tuple[tuple[str, ...], tuple[str, ...]]  # (this chain's SNI names, every SNI name)


def _tables(listener: Listener) -> list[tuple[str, Sni | None]]:
    """(name, SNI context) of every route table of one HTTP(S) listener: one, or with
    ``sni_host_check`` one per SNI filter chain (``listeners.sni_tables``) plus the default
    chain's (named after the listener)."""
    if not (listener.protocol is Protocol.HTTPS and listener.sni_host_check):
        return [(listener.name, None)]
    tables = sni_tables(listener)
    every = tuple(n for _, _, names in tables for n in names)
    return [(listener.name, ((), every)),
            *((table, (names, every)) for _, table, names in tables)]


def route_configurations(listener: Listener, *, persistence: PersistenceByPool
                         ) -> list[route_pb2.RouteConfiguration]:
    """Every route table of one HTTP(S) listener (see ``_tables``)."""
    return [route_configuration(listener, persistence=persistence, name=name, sni=sni)
            for name, sni in _tables(listener)]


def _table_head(name: str, *, real_ip: bool = False) -> route_pb2.RouteConfiguration:
    """A route table without its virtual hosts; ``real_ip``: it sets X-Real-IP."""
    config = route_pb2.RouteConfiguration(name=name)
    config.validate_clusters.value = False  # unknown pools answer 503 instead of a NACK
    if not real_ip:  # a formatter evaluated for every request: only where asked; elsewhere
        # a client's own X-Real-IP is dropped, so no pod trusts a forged one (one look: the
        # bootstrap gives the header a slot, ``bootstrap.INLINE_REQUEST_HEADERS``)
        config.request_headers_to_remove.append("x-real-ip")
        return config
    # The client address after X-Forwarded-For processing (the peer, or the address the
    # listener's trusted hops name); the table's own headers apply last, so neither the client
    # nor a route's header filter can set it.
    config.request_headers_to_add.append(base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key="x-real-ip",
                                    value="%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD))
    return config


def _served(listener: Listener, sni: Sni | None
            ) -> Iterator[tuple[VirtualHost, bool]]:
    """Each virtual host the table serves, in order, and whether it answers 421 (its most
    specific covering SNI name is another chain's); duplicate domains are left out (Envoy
    rejects them; the first, of higher precedence, wins)."""
    seen: set[str] = set()
    for vhost in listener.virtual_hosts:
        domain = vhost.hostname.lower()
        if domain in seen:
            continue
        seen.add(domain)
        misdirected = sni is not None and _sni_owner(domain, sni[1]) not in (sni[0] or (None,))
        yield vhost, misdirected


def route_configuration(listener: Listener, *, persistence: PersistenceByPool,
                        name: str | None = None, sni: Sni | None = None
                        ) -> route_pb2.RouteConfiguration:
    """The route table of one HTTP(S) listener; ``persistence`` gives pools' hash policies.

    ``sni`` = (the SNI names of the filter chain this table serves, () for the default chain;
    every SNI name of the listener): a virtual host whose most specific covering SNI name is
    not the chain's own answers 421 Misdirected Request — the connection was opened for
    another listener's certificate (Gateway API: SNI and Host must match the same listener).
    """
    config = _table_head(name or listener.name, real_ip=listener.real_ip)
    catch_all = next((v for v in listener.virtual_hosts if v.hostname == "*"), None)
    for vhost, misdirected in _served(listener, sni):
        config.virtual_hosts.append(_misdirected(vhost) if misdirected
                                    else _virtual_host(vhost, catch_all, persistence))
    return config


#: Tag of RouteConfiguration.virtual_hosts (field 2, length-delimited). The table's other
#: fields are 1 (name) and above 2, so its deterministic encoding is
#: name + (tag, length, virtual host)* + the rest: each part can be encoded once and reused.
_VHOSTS_TAG = b"\x12"
assert route_pb2.RouteConfiguration.DESCRIPTOR.fields_by_name["virtual_hosts"].number == 2
assert all(f.number != 2 for f in route_pb2.RouteConfiguration.DESCRIPTOR.fields
           if f.name != "virtual_hosts")


def varint(n: int) -> bytes:
    """``n`` as a protobuf base-128 varint (a length prefix of a joined encoding)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _order_of(vhost: VirtualHost) -> tuple[int, int, str]:
    return host_order(vhost.hostname)


_VhostKey = tuple[int, bool, int]  # (id(vhost), answers 421, id(catch-all) it folds in or 0)
_Part = tuple[VirtualHost, VirtualHost | None, bytes]  # (vhost, catch-all folded in, encoding)
#: One edit of a table (``TableEncoder.edits``): the virtual host before, after, and the
#: encoding of the one after (as a table entry); None where absent.
Edit = tuple[VirtualHost | None, VirtualHost | None, bytes | None]


@dataclass(frozen=True, slots=True)
class Joined:
    """A table not joined yet (a listener's own table, ``TableEncoder.tables``): its parts, and a
    digest of them that does not need the join (per-part digests, hashed in order). Calling
    it joins the parts: the table's encoding."""

    parts: tuple[bytes, ...]
    digest: str

    def __call__(self) -> bytes:
        return b"".join(self.parts)


def _part_digest(part: bytes) -> bytes:
    return hashlib.blake2b(part, digest_size=12).digest()


def _joined_digest(name: str, sums: Iterable[bytes]) -> str:
    """The digest of a ``Joined`` table ``name`` whose virtual-host parts have digests
    ``sums`` (its head and tail follow from the name)."""
    return hashlib.blake2b(b"".join((b"joined\0", name.encode(), b"\0", *sums)),
                           digest_size=12).hexdigest()


def _key(vhost: VirtualHost, misdirected: bool, catch_all: VirtualHost | None
         ) -> tuple[bool, _VhostKey]:
    """Whether ``vhost`` may fold the catch-all in, and its encoding's key."""
    folds = (not misdirected and vhost.wildcard is WildcardMode.ONE_LABEL
             and catch_all is not None)
    return folds, (id(vhost), misdirected, id(catch_all) if folds else 0)


class TableEncoder:
    """Route tables as bytes, re-encoding only the virtual hosts that changed.

    A virtual host's encoding depends on its IR node (by identity: the translator hands back
    the very same ``VirtualHost`` while nothing it holds changed), on whether it answers 421 in
    this table, on the catch-all host a one-label wildcard folds in, and on the pools' hash
    policies (``persistence``; when they change every encoding is dropped). A table is then
    the concatenation of its parts, byte-equal to ``route_configuration(...).
    SerializeToString(deterministic=True)`` (tested), so a change of one route costs one
    virtual host's encoding plus a join, not the whole table. Encodings are kept per listener
    and forgotten with it (``done``).
    """

    def __init__(self) -> None:
        self._persistence: PersistenceByPool | None = None
        self._parts: dict[str, dict[_VhostKey, _Part]] = {}  # listener name → its parts
        self._next: dict[str, dict[_VhostKey, _Part]] = {}
        self._heads: dict[tuple[str, bool], tuple[bytes, bytes]] = {}
        # listener name → (listener, one encoding per virtual host, in order, and their
        # digests) of a listener with one table, no SNI context
        # and lowercase, distinct hostnames: what ``patch`` edits
        self._aligned: dict[str, tuple[Listener, list[bytes], list[bytes]]] = {}
        # a table's fields after its virtual hosts (any name), without and with X-Real-IP
        self._rest: dict[bool, bytes] = {}
        self._entries: tuple[Sequence[VirtualHost], Sequence[bytes]] = ((), ())
        self.edits: list[Edit] | None = None
        """The last ``tables`` call's edits of the listener's table (last position first), if
        it edited the table; None if it walked every virtual host."""

    @property
    def entries(self) -> list[tuple[VirtualHost, bytes]]:
        """The last ``tables`` call's (virtual host, its encoding as a table entry), in the
        listener's own table (not an SNI chain's): the parts scoped tables are made of. Valid
        until the next ``tables`` call."""
        return list(zip(*self._entries, strict=True))

    def tables(self, listener: Listener, *, persistence: PersistenceByPool,
               changed: Sequence[tuple[VirtualHost | None, VirtualHost | None]] | None = None,
               previous: Listener | None = None
               ) -> list[tuple[str, bytes | Joined]]:
        """(name, encoded RouteConfiguration) of each table of ``listener``.

        ``changed`` (with ``previous``, the listener of the last call for this name): the
        virtual hosts that differ from ``previous``'s as (old, new) pairs, every other one the
        same object in the same ``host_order`` (``podway.ir.IRChange``). The table is then
        edited, not walked: the changed parts encoded, the rest reused by position.

        The listener's own table (not an SNI chain's) comes as ``Joined``: not joined (the
        stream that sends it joins it; for a listener served as scopes only state-of-the-world
        streams read it, ``podway.envoy.config.scoped``), its digest from the parts' digests,
        kept across edits, so it is the same whichever form the listener is served in.
        """
        if persistence != self._persistence:
            self._parts, self._persistence = {}, persistence
            self._aligned = {}
        if changed is not None and previous is not None:
            patched = self._patch(listener, changed, previous, persistence)
            if patched is not None:
                return patched
        self.edits = None
        catch_all = next((v for v in listener.virtual_hosts if v.hostname == "*"), None)
        before = self._parts.get(listener.name, {})
        now = self._next.setdefault(listener.name, {})
        out: list[tuple[str, bytes | Joined]] = []
        self._entries = ((), ())
        tables = _tables(listener)
        for name, sni in tables:
            head, tail = self._head(name, real_ip=listener.real_ip)
            parts = [head]
            served: list[VirtualHost] = []
            lowercase = True
            for vhost, misdirected in _served(listener, sni):
                lowercase = lowercase and vhost.hostname == vhost.hostname.lower()
                folds, key = _key(vhost, misdirected, catch_all)
                hit = now.get(key) or before.get(key)
                if hit is None or hit[0] is not vhost or (folds and hit[1] is not catch_all):
                    built = (_misdirected(vhost) if misdirected
                             else _virtual_host(vhost, catch_all, persistence))
                    data = built.SerializeToString(deterministic=True)
                    hit = (vhost, catch_all if folds else None,
                           _VHOSTS_TAG + varint(len(data)) + data)
                now[key] = hit
                parts.append(hit[2])
                served.append(vhost)
            parts.append(tail)
            own = parts[1:-1]
            if sni is None:
                self._entries = (served, own)
            sums = [_part_digest(p) for p in own] if sni is None else None
            out.append((name, Joined(tuple(parts), _joined_digest(name, sums))
                        if sums is not None else b"".join(parts)))
            self._aligned.pop(listener.name, None)
            if (len(tables) == 1 and sums is not None and lowercase
                    and len(parts) == len(listener.virtual_hosts) + 2):
                self._aligned[listener.name] = (listener, own, sums)
        return out

    def _patch(self, listener: Listener,
               changed: Sequence[tuple[VirtualHost | None, VirtualHost | None]],
               previous: Listener, persistence: PersistenceByPool
               ) -> list[tuple[str, bytes | Joined]] | None:
        """The table of ``listener`` edited from ``previous``'s; None when it cannot be."""
        held = self._aligned.get(listener.name)
        if held is None or held[0] is not previous or _tables(listener) != [(listener.name, None)]:
            return None
        old_all, new_all = previous.virtual_hosts, listener.virtual_hosts
        catch_all = new_all[-1] if new_all and new_all[-1].hostname == "*" else None
        if catch_all is not (old_all[-1] if old_all and old_all[-1].hostname == "*" else None):
            return None
        edits: list[tuple[int, VirtualHost | None, VirtualHost | None]] = []
        grown = 0
        for old, new in changed:  # checked first: the parts are edited in place after
            either = new if new is not None else old
            host = either.hostname if either is not None else "*"
            if host == "*" or host != host.lower() or (
                    old is not None and new is not None and old.hostname != new.hostname):
                return None
            key = host_order(host)
            at = bisect_left(old_all, key, key=_order_of)
            if (old is not None) != (at < len(old_all) and old_all[at] is old):
                return None
            if old is None and at < len(old_all) and old_all[at].hostname == host:
                return None
            if new is not None:
                found = bisect_left(new_all, key, key=_order_of)
                if found == len(new_all) or new_all[found] is not new:
                    return None
            edits.append((at, old, new))
            grown += (new is not None) - (old is not None)
        if len(new_all) != len(old_all) + grown or len({at for at, _, _ in edits}) != len(edits):
            return None
        parts = held[1]
        sums = held[2]
        done = self._edit(listener.name, parts, sums, edits, catch_all=catch_all,
                          persistence=persistence)
        self._aligned[listener.name] = (listener, parts, sums)
        self._entries = (new_all, parts)
        self.edits = done
        head, tail = self._head(listener.name, real_ip=listener.real_ip)
        return [(listener.name, Joined((head, *parts, tail), _joined_digest(listener.name, sums)))]

    def _edit(self, name: str, parts: list[bytes], sums: list[bytes],
              edits: list[tuple[int, VirtualHost | None, VirtualHost | None]], *,
              catch_all: VirtualHost | None, persistence: PersistenceByPool) -> list[Edit]:
        """Apply ``edits`` (position, old, new) to ``parts`` and their digests ``sums``."""
        # The per-key parts go on too (a later walk of the table finds the new ones).
        keyed = self._next.setdefault(name, self._parts.get(name, {}))
        done: list[Edit] = []
        for at, old, new in sorted(edits, key=lambda e: e[0], reverse=True):
            if old is not None:  # its encoding goes with it (else one more per change)
                gone = old.wildcard is WildcardMode.ONE_LABEL and catch_all is not None
                keyed.pop((id(old), False, id(catch_all) if gone else 0), None)
            if new is None:
                del parts[at]
                del sums[at]
                done.append((old, None, None))
                continue
            data = _virtual_host(new, catch_all, persistence).SerializeToString(deterministic=True)
            part = _VHOSTS_TAG + varint(len(data)) + data
            folds = new.wildcard is WildcardMode.ONE_LABEL and catch_all is not None
            keyed[(id(new), False, id(catch_all) if folds else 0)] = (
                new, catch_all if folds else None, part)
            if old is not None:
                parts[at], sums[at] = part, _part_digest(part)
            else:
                parts.insert(at, part)
                sums.insert(at, _part_digest(part))
            done.append((old, new, part))
        return done

    def table_bytes(self, name: str, entries: Iterable[bytes], *, real_ip: bool = False
                    ) -> bytes:
        """A route table ``name`` holding the virtual hosts ``entries`` (from ``entries``, in
        this order), byte-equal to encoding ``_table_head(name, real_ip=real_ip)`` with them:
        a scope's table."""
        data = name.encode()
        return b"".join((b"\x0a", varint(len(data)), data, *entries, self._tail(real_ip)))

    def _tail(self, real_ip: bool) -> bytes:
        found = self._rest.get(real_ip)
        if found is None:
            found = self._rest[real_ip] = self._head("", real_ip=real_ip)[1]
        return found

    def keep(self, listener: Listener) -> None:
        """``listener``'s tables were reused as they were: keep their encodings."""
        if listener.name not in self._next:
            self._next[listener.name] = self._parts.get(listener.name, {})

    def done(self) -> None:
        """End of one build: forget the encodings of listeners this build did not have."""
        self._parts, self._next = self._next, {}
        for name in [n for n in self._aligned if n not in self._parts]:
            del self._aligned[name]

    def _head(self, name: str, *, real_ip: bool) -> tuple[bytes, bytes]:
        found = self._heads.get((name, real_ip))
        if found is None:
            head = route_pb2.RouteConfiguration(name=name).SerializeToString(deterministic=True)
            whole = _table_head(name, real_ip=real_ip).SerializeToString(deterministic=True)
            assert whole.startswith(head)
            if len(self._heads) > 4096:  # names of listeners long gone
                self._heads.clear()
            found = self._heads[(name, real_ip)] = (head, whole[len(head):])
        return found


def _sni_owner(host: str, names: tuple[str, ...]) -> str | None:
    """The most specific SNI name covering ``host`` (Gateway wildcards: any depth), or None."""
    covering = [n for n in names if covers(n, host, WildcardMode.SUFFIX)]
    return min(covering, key=host_order) if covering else None


def _misdirected(vhost: VirtualHost) -> rc.VirtualHost:
    out = rc.VirtualHost(name=f"{vhost.name}/misdirected", domains=[vhost.hostname.lower()])
    route = rc.Route(name=f"{vhost.name}/misdirected")
    route.match.prefix = "/"
    route.direct_response.status = 421
    out.routes.append(route)
    return out


def _virtual_host(vhost: VirtualHost, catch_all: VirtualHost | None,
                  persistence: PersistenceByPool) -> rc.VirtualHost:
    out = rc.VirtualHost(name=vhost.name, domains=[vhost.hostname.lower()])
    retry_connect_failures(out.retry_policy)  # once per host, not per route: smaller tables
    one_label = (vhost.wildcard is WildcardMode.ONE_LABEL and vhost.hostname.startswith("*.")
                 and vhost.hostname != "*")
    authority = one_label_authority(vhost.hostname) if one_label else None
    for route in vhost.routes:
        out.routes.extend(envoy_routes(route, persistence, authority=authority))
    if one_label and catch_all is not None:
        for route in catch_all.routes:
            out.routes.extend(envoy_routes(route, persistence, authority=None))
    return out


