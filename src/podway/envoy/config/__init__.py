"""IR → Envoy v3 resources: a pure function plus a memo that makes repeated builds O(change).

``build(ir)`` returns every resource, keyed by type URL and name. ``Builder`` remembers what it
built for each IR node *by identity*: the incremental translator hands back the very same
``Listener`` objects after an endpoint-only change and replaces only the changed ``Pool`` objects,
so the next build re-serialises only those pools' load assignments (and the load assignment of
an L4 listener's split cluster when one of its pools changed: ``podway.envoy.config.split``).
A listener whose virtual hosts changed gets its route tables joined from per-virtual-host
encodings (``routes.TableEncoder``), so only the changed virtual hosts are encoded again; a
large exact-hostname listener is also served as scopes, one scope per host and tables shared
by buckets of hosts, each kept while its hosts encode the same (``podway.envoy.config.scoped``,
``scope_tables``). The
translator's ``IRChange`` (when its base is the IR built last) narrows a build to the named
pools and virtual hosts (and the scoped listener's host count, shared tables and scopes to
the hosts it names), and ``Builder.hint`` passes that on to the cache. Each resource carries a
digest of its content (of its serialised bytes; for the deferred table named after a
listener, of its parts' digests); the cache (``podway.envoy.xds.cache``) uses it to keep versions of
unchanged resources, which is what keeps listeners, routes and clusters untouched in Envoy.

The package is named for what it makes (Envoy configuration), not ``xds.build``: a folder
``build`` inside a package named like the ``xds`` protobuf package made tools that resolve
imports from the tree (and ignore ``build`` folders) lose it. It depends on ``podway.ir`` and the
type URLs of ``podway.envoy.types`` only; ``podway.envoy.xds`` (cache, server) consumes its
output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from envoy.config.route.v3 import route_pb2

from podway.envoy import types
from podway.envoy.config import oauth2, scoped
from podway.envoy.config.clusters import cluster
from podway.envoy.config.endpoints import assignment_resource, load_assignment
from podway.envoy.config.jwt import Checks
from podway.envoy.config.listeners import listener
from podway.envoy.config.resource import Resource, Resources
from podway.envoy.config.routes import TableEncoder
from podway.envoy.config.scope_tables import ScopeTables
from podway.envoy.config.scoped import SCOPED_MIN_HOSTS, HostCount
from podway.envoy.config.secrets import secret
from podway.envoy.config.split import (
    split_members,
    split_name,
    split_pools,
    split_route,
    split_settings,
)
from podway.ir import (
    IR,
    IRChange,
    L4Route,
    Listener,
    Persistence,
    Pool,
    PoolSettings,
    VirtualHost,
)
from podway.ir import ListenerProtocol as Protocol


def build(ir: IR, *, scoped_min_hosts: int = SCOPED_MIN_HOSTS,
          reuse_port: bool = False) -> Resources:
    """Every Envoy resource for ``ir`` (no memo)."""
    return Builder(scoped_min_hosts=scoped_min_hosts, reuse_port=reuse_port).build(ir)


class Builder:
    """Builds resources, reusing the previous build's output for identical IR nodes.

    Given the translator's ``IRChange`` relative to the IR it built last, a build visits only
    the named pools and the named virtual hosts of each listener (``TableEncoder`` edits the
    table); without it every pool and virtual host is looked up. ``hint`` then tells the
    cache which names of the cluster and endpoint types may differ from the previous build's
    mappings (``xds.cache.Cache.set``).
    """

    def __init__(self, *, scoped_min_hosts: int = SCOPED_MIN_HOSTS,
                 dynamic_stats: bool = False, reuse_port: bool = False) -> None:
        self.scoped_min_hosts = scoped_min_hosts  # see ``podway.envoy.config.scoped``
        # The routers' per-pool stats (``listeners._router``): only for an Envoy that keeps
        # every stat (``--envoy-stats detailed``).
        self.dynamic_stats = dynamic_stats
        self.reuse_port = reuse_port  # listeners share their port (``listeners.listener``)
        # id → (listener, served by a TCP split cluster, served as scopes, its resources)
        self._listeners: dict[int, tuple[Listener, bool, bool, tuple[Resource, ...]]] = {}
        # (id, persistence) → (listener, served as scopes, its own tables)
        self._routes: dict[tuple[int, _Signature], tuple[Listener, bool, tuple[Resource, ...]]] = {}
        self._scopes = ScopeTables()  # the shared tables and scopes of the scoped listener
        # id → (listener, its host count if it is HTTP: ``scoped.HostCount``)
        self._counted: dict[int, tuple[Listener, HostCount | None]] = {}
        self._own_tables: frozenset[str] = frozenset()  # the last build's tables not of scopes
        self._pools: dict[str, tuple[Pool, Resource, Resource]] = {}  # pool, cluster, endpoints
        # A first start's clusters, made from the pools' settings before their members were
        # known (``clusters_of``): taken by the next build of pools with these very settings.
        self._early: dict[str, tuple[PoolSettings, Resource]] = {}
        # split cluster name → (listener, its pools, cluster, endpoints)
        self._splits: dict[str, tuple[Listener, tuple[Pool, ...], Resource, Resource]] = {}
        self._tables = TableEncoder()  # route tables: one encoding per unchanged virtual host
        self._jwt = Checks()  # the JWT filter's config (ECDS), every provider of the IR
        self._ir: IR | None = None  # the last build's IR, output and pool persistence
        self._out: dict[str, Mapping[str, Resource]] = {}
        self._persistence: dict[str, Persistence] = {}
        self._clusters: dict[str, Resource] = {}  # the last build's, as plain dicts
        self._endpoints: dict[str, Resource] = {}
        self.hint: dict[str, tuple[Mapping[str, Resource], frozenset[str]]] = {}
        """Type URL → (the previous build's mapping of that type, the only names that may
        differ from it); set by each ``build``, empty when everything may differ."""

    def build(self, ir: IR, change: IRChange | None = None) -> Resources:
        patch = change if change is not None and change.base is self._ir and self._out else None
        base = {item.name: item for item in patch.base.listeners} if patch is not None else {}
        out: dict[str, dict[str, Resource]] = {t: {} for t in types.PUSH_ORDER}
        persistence = self._persistence_of(ir, patch)
        signature = tuple(sorted(persistence.items(), key=lambda kv: kv[0]))
        listeners: dict[int, tuple[Listener, bool, bool, tuple[Resource, ...]]] = {}
        routes: dict[tuple[int, _Signature], tuple[Listener, bool, tuple[Resource, ...]]] = {}
        split: list[tuple[Listener, L4Route]] = []  # listeners served by a split cluster
        chosen = self._pick_scoped(ir, patch, base)
        # The names of shared tables and scopes that may differ from the last build's
        # (None: any may).
        edited = self._scopes_of(chosen)
        for item in ir.listeners:
            split_by = split_route(item, ir.pools)
            if split_by is not None:
                split.append((item, split_by))
            # A TCP split depends on the pools' settings too, not only on the listener.
            tcp_split = item.protocol is Protocol.TCP and split_by is not None
            as_scopes = item is chosen
            cached = self._listeners.get(id(item))
            built = (cached[3] if cached is not None and cached[0] is item
                     and cached[1] == tcp_split and cached[2] == as_scopes
                     else _listener(item, tcp_split=tcp_split, scoped=as_scopes,
                                    dynamic_stats=self.dynamic_stats,
                                    reuse_port=self.reuse_port))
            listeners[id(item)] = (item, tcp_split, as_scopes, built)
            for resource in built:
                out[_type_of(resource)].setdefault(resource.name, resource)
            if item.protocol in (Protocol.HTTP, Protocol.HTTPS) and built:
                tables, edited = self._tables_of(item, as_scopes=as_scopes, signature=signature,
                                                 persistence=persistence, patch=patch,
                                                 previous=base.get(item.name), edited=edited)
                routes[(id(item), signature)] = (item, as_scopes, tables)
                for route in tables:
                    out[types.ROUTE][route.name] = route
        if patch is not None:
            names = self._patch_pools(ir, patch.pools, out, splits=bool(split))
        else:
            self._all_pools(ir, out)
        splits = self._build_splits(ir, split, out)
        self._add_extras(ir, patch, out)
        self._tables.done()
        own, same = self._add_scopes(out, unchanged=patch is not None and edited == set())
        result: dict[str, Mapping[str, Resource]] = {
            t: MappingProxyType(v) for t, v in out.items()}
        if same:
            for kind in (types.ROUTE, types.SCOPE):
                result[kind] = self._out[kind]
        self.hint = {}
        if patch is not None:
            self._hint(result, names | self._splits.keys() | splits.keys(),
                       None if edited is None else edited | own | self._own_tables, edited)
        self._listeners, self._routes, self._own_tables = listeners, routes, own
        self._splits = splits
        self._ir, self._out, self._persistence = ir, dict(result), persistence
        self._clusters, self._endpoints = out[types.CLUSTER], out[types.ENDPOINT]
        return result

    def _add_extras(self, ir: IR, patch: IRChange | None,
                    out: dict[str, dict[str, Resource]]) -> None:
        """The JWT filter's config (ECDS) and the client certificates towards backends."""
        if any(item.protocol in (Protocol.HTTP, Protocol.HTTPS) for item in ir.listeners):
            jwt = self._jwt.resource(ir, patch)  # their managers name it (never left waiting)
            out[types.EXTENSION][jwt.name] = jwt
        _client_certificates(ir, out[types.SECRET])

    def _tables_of(self, item: Listener, *, as_scopes: bool, signature: _Signature,
                   persistence: dict[str, Persistence], patch: IRChange | None,
                   previous: Listener | None, edited: set[str] | None
                   ) -> tuple[tuple[Resource, ...], set[str] | None]:
        """The route tables of one HTTP(S) listener: the last build's while the listener, the
        pools' hash policies and the way it is served (scopes or not) are the same; and
        ``edited`` with the shared tables and scopes this listener touched."""
        hit = self._routes.get((id(item), signature))
        if (hit is not None and hit[0] is item and hit[1] == as_scopes
                and (not as_scopes or self._scopes.at is item)):
            self._tables.keep(item)
            return hit[2], edited
        tables = self._route_tables(
            item, persistence,
            changed=patch.vhosts.get(item.name) if patch is not None else None,
            previous=previous)
        if as_scopes:
            touched = self._scopes.update(item, previous, self._tables)
            edited = None if edited is None or touched is None else edited | touched
        return tables, edited

    def _scopes_of(self, chosen: Listener | None) -> set[str] | None:
        """Forget the scopes when another listener (or none) is served as scopes now: None
        (every shared table and scope may differ), else the empty set (none yet)."""
        return None if self._scopes.forget_unless(chosen) else set()

    def _add_scopes(self, out: dict[str, dict[str, Resource]], *, unchanged: bool
                    ) -> tuple[frozenset[str], bool]:
        """Add the shared tables and scopes to ``out`` (copies: the builder's own are
        edited in place by the next build); the names of the other tables, and whether the
        previous build's route and scope mappings can be handed over as they are instead
        (``unchanged``: no shared table or scope differs, and no other table does)."""
        own = frozenset(out[types.ROUTE])
        if (unchanged and self._scopes.tables and own == self._own_tables
                and all(self._out[types.ROUTE].get(n) is r for n, r in out[types.ROUTE].items())):
            return own, True  # (an endpoint-only change: no copy of 2 x 10,000 names)
        if self._scopes.tables:
            out[types.ROUTE] = {**out[types.ROUTE], **self._scopes.tables}
            out[types.SCOPE] = dict(self._scopes.scopes)
        return own, False

    def _hint(self, result: dict[str, Mapping[str, Resource]], pools: set[str],
              tables: set[str] | None, scopes: set[str] | None) -> None:
        """``hint`` for a patched build: the names of each type that may differ (None: any),
        and the previous build's very mapping where none does (the cache sees at once that
        nothing moved)."""
        self.hint = {t: (self._out[t], frozenset(pools)) for t in (types.CLUSTER, types.ENDPOINT)}
        if not pools:
            result[types.CLUSTER] = self._out[types.CLUSTER]
            result[types.ENDPOINT] = self._out[types.ENDPOINT]
        if tables is not None and scopes is not None:
            self.hint[types.ROUTE] = (self._out[types.ROUTE], frozenset(tables))
            self.hint[types.SCOPE] = (self._out[types.SCOPE], frozenset(scopes))
            if not scopes:
                result[types.SCOPE] = self._out[types.SCOPE]

    def _route_tables(self, item: Listener, persistence: dict[str, Persistence], *,
                      changed: Sequence[tuple[VirtualHost | None, VirtualHost | None]] | None,
                      previous: Listener | None) -> tuple[Resource, ...]:
        """The route tables of ``item`` (edited from ``previous``'s when ``changed`` says how).
        The table named after the listener is deferred (joined when first read; only
        state-of-the-world streams read it while the listener is served as scopes), also
        when it is not served as scopes: its digest, from its parts, then stays the same for
        the same bytes when the listener's role changes (the cache sees no change)."""
        return tuple(
            Resource.of_bytes(name, route_pb2.RouteConfiguration, data)
            if isinstance(data, bytes)
            else Resource.deferred(name, route_pb2.RouteConfiguration, data, data.digest)
            for name, data in self._tables.tables(
                item, persistence=MappingProxyType(persistence), changed=changed,
                previous=previous))

    def _persistence_of(self, ir: IR, patch: IRChange | None) -> dict[str, Persistence]:
        """Each pool's hash policy (routes of every table carry them)."""
        if patch is None:
            return {name: pool.settings.persistence for name, pool in ir.pools.items()
                    if pool.settings.persistence is not None}
        persistence = self._persistence
        if any(persistence.get(name) != (ir.pools[name].settings.persistence if name in ir.pools
                                         else None) for name in patch.pools):
            persistence = dict(persistence)
            for name in patch.pools:
                pool = ir.pools.get(name)
                if pool is not None and pool.settings.persistence is not None:
                    persistence[name] = pool.settings.persistence
                else:
                    persistence.pop(name, None)
        return persistence

    def _pool(self, name: str, pool: Pool) -> tuple[Pool, Resource, Resource]:
        entry = self._pools.get(name)
        if entry is None or entry[0] is not pool:
            # Only pools that are new objects cost more than a lookup; settings and members
            # are compared separately so a member change never rebuilds the cluster.
            early = self._early.pop(name, None)
            cluster_resource = (
                entry[1] if entry is not None and entry[0].settings == pool.settings
                else early[1] if early is not None and early[0] is pool.settings
                else Resource.of(name, cluster(name, pool.settings)))
            endpoint_resource = (
                entry[2] if entry is not None and entry[0].members == pool.members
                else assignment_resource(name, load_assignment(name, pool.members),
                                         pool.members))
            entry = (pool, cluster_resource, endpoint_resource)
        return entry

    def clusters_of(self, settings: Mapping[str, PoolSettings]) -> Resources:
        """The clusters of pools by name and settings, members not known yet: what a first
        start sends before anything else (``podway.pipeline``), while the members are still
        being resolved. Kept for the next ``pools_of`` or ``build``, whose pools carry these
        very settings objects."""
        self._early = {name: (value, Resource.of(name, cluster(name, value)))
                       for name, value in settings.items()}
        return {types.CLUSTER: MappingProxyType({n: e[1] for n, e in self._early.items()})}

    def pools_of(self, ir: IR) -> Resources:
        """The clusters and load assignments of ``ir``'s pools alone (kept: the next
        ``build`` of this IR reuses them): what a first start sends ahead of its listeners
        and routes (``xds.cache.Cache.set_early``)."""
        out: dict[str, dict[str, Resource]] = {types.CLUSTER: {}, types.ENDPOINT: {}}
        self._all_pools(ir, out)
        return {t: MappingProxyType(v) for t, v in out.items()}

    def _all_pools(self, ir: IR, out: dict[str, dict[str, Resource]]) -> None:
        pools: dict[str, tuple[Pool, Resource, Resource]] = {}
        for name, pool in ir.pools.items():
            entry = pools[name] = self._pool(name, pool)
            out[types.CLUSTER][name] = entry[1]
            out[types.ENDPOINT][name] = entry[2]
        self._pools = pools
        self._early = {}  # taken, or of pools this IR does not have

    def _patch_pools(self, ir: IR, names: frozenset[str],
                     out: dict[str, dict[str, Resource]], *, splits: bool) -> set[str]:
        """The previous build's clusters and endpoints with only ``names`` redone (the split
        clusters are redone by ``_build_splits``); the names that may differ. The previous
        mappings are handed over as they are only when no split cluster (of this build or
        the last) will be written into them: they are published."""
        if not names and not self._splits and not splits:
            out[types.CLUSTER], out[types.ENDPOINT] = self._clusters, self._endpoints
            return set()
        clusters, endpoints = self._clusters.copy(), self._endpoints.copy()
        for name in self._splits:
            if name not in self._pools:
                clusters.pop(name, None)
                endpoints.pop(name, None)
        clusters.update(out[types.CLUSTER])  # listeners bring none today; keep any they do
        endpoints.update(out[types.ENDPOINT])
        for name in names:
            pool = ir.pools.get(name)
            if pool is None:
                self._pools.pop(name, None)
                clusters.pop(name, None)
                endpoints.pop(name, None)
                continue
            entry = self._pools[name] = self._pool(name, pool)
            clusters[name], endpoints[name] = entry[1], entry[2]
        out[types.CLUSTER], out[types.ENDPOINT] = clusters, endpoints
        return set(names)

    def _pick_scoped(self, ir: IR, patch: IRChange | None, base: Mapping[str, Listener]
                     ) -> Listener | None:
        """The listener served as scopes (``scoped.pick``), host counts kept by identity and,
        for a listener the patch names, edited from its previous count."""
        counted: dict[int, tuple[Listener, HostCount | None]] = {}
        for item in ir.listeners:
            hit = self._counted.get(id(item))
            if hit is None or hit[0] is not item:
                count: HostCount | None = None
                pairs = patch.vhosts.get(item.name) if patch is not None else None
                before = base.get(item.name)
                if pairs is not None and before is not None and before is not item \
                        and item.protocol is Protocol.HTTP:
                    # Taken out of the memo first: edited in place, it is no longer before's.
                    held = self._counted.pop(id(before), None)
                    if held is not None and held[0] is before and held[1] is not None:
                        count = held[1]
                        count.edit(pairs)
                hit = (item, count if count is not None else HostCount.of(item))
            counted[id(item)] = hit
        self._counted = counted

        def host_count(item: Listener) -> int | None:
            count = counted[id(item)][1]
            return count.count if count is not None else None

        return scoped.pick(ir.listeners, self.scoped_min_hosts, host_count=host_count)

    def _build_splits(self, ir: IR, split: list[tuple[Listener, L4Route]],
                      out: dict[str, dict[str, Resource]]
                      ) -> dict[str, tuple[Listener, tuple[Pool, ...], Resource, Resource]]:
        """The synthetic cluster of each L4 listener that needs one (``split``: the listener
        and its ``split_route``), rebuilt only when the listener or one of its pools is a new
        object."""
        splits: dict[str, tuple[Listener, tuple[Pool, ...], Resource, Resource]] = {}
        for item, route in split:
            name = split_name(item)
            shares = split_pools(route, ir.pools)
            used = tuple(pool for pool, _ in shares)
            hit = self._splits.get(name)
            if (hit is None or hit[0] is not item or len(hit[1]) != len(used)
                    or any(a is not b for a, b in zip(hit[1], used, strict=True))):
                hit = (item, used,
                       Resource.of(name, cluster(name, split_settings(route, shares))),
                       assignment_resource(name, load_assignment(name, split_members(shares))))
            splits[name] = hit
            out[types.CLUSTER][name] = hit[2]
            out[types.ENDPOINT][name] = hit[3]
        return splits


_Signature = tuple[tuple[str, Persistence], ...]  # the pools' hash policies, by name


def _listener(item: Listener, *, tcp_split: bool = False, scoped: bool = False,
              dynamic_stats: bool = False, reuse_port: bool = False
              ) -> tuple[Resource, ...]:
    """The listener, its secrets and its OIDC filters' configs; nothing for a listener Envoy
    could not serve."""
    if item.protocol is Protocol.HTTPS and not item.certificates and not item.l4_routes:
        return ()  # no certificate yet: Envoy rejects a TLS listener without filter chains
    if item.protocol is Protocol.TLS and not item.l4_routes:
        return ()
    built = [Resource.of(item.name, listener(item, tcp_split=tcp_split, scoped=scoped,
                                             dynamic_stats=dynamic_stats,
                                             reuse_port=reuse_port))]
    certificates = {c.name: c for c in item.certificates}
    certificates.update((r.certificate.name, r.certificate) for r in item.l4_routes
                        if r.certificate is not None and r.certificate.name not in certificates)
    built.extend(Resource.of(c.name, secret(c)) for c in certificates.values())
    for login in oauth2.used(item):  # the filters of its OIDC policies and their secrets
        built.extend(oauth2.resources(login))
    return tuple(built)


def _client_certificates(ir: IR, secrets: dict[str, Resource]) -> None:
    """The secrets of the client certificates pools show their members (a Gateway's,
    ``spec.tls.backend``): referenced by SDS from the clusters, like listeners' certificates."""
    for pool in ir.pools.values():
        tls = pool.settings.upstream_tls
        if tls is not None and tls.client_certificate is not None:
            cert = tls.client_certificate
            secrets.setdefault(cert.name, Resource.of(cert.name, secret(cert)))


def _type_of(resource: Resource) -> str:
    type_url: str = resource.packed.type_url
    return type_url


__all__ = ["Builder", "Resource", "Resources", "build"]
