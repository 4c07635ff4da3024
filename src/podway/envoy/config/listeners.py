"""Listeners (LDS): one per IR listener, bound to its address and port.

* HTTP and HTTPS listeners run the HTTP connection manager with routes from RDS (named after the
  listener), so a route change never replaces the listener and never drains its connections
  (one exception: the TLS inspector, below).
  A large exact-hostname HTTP listener takes them from scopes instead, one small table per host
  (``podway.envoy.config.scoped``).
* Host matching (``podway.ir.hosts.request_host``): the manager drops the Host's port and one
  trailing dot (``shop.test.`` is the absolute form of ``shop.test``; nginx drops it too) before
  choosing a virtual host, whose domains Envoy compares in any case.
* HTTPS: one filter chain per certificate, chosen by SNI (``server_names``); the certificate
  without hostnames (or else the first) is the default chain. A named chain that would equal
  the default chain (one named certificate, nothing passed through) is left out: the default
  chain serves every SNI the same way (``_drop_redundant``). Keys come over SDS, never inline.
  SNI matches in any case (Envoy lower-cases the client's name and ``server_names``); an SNI
  with a trailing dot (RFC 6066 forbids it) matches no name and takes the default chain.
  With ``sni_host_check`` each chain has its own route table (``sni_tables``), in which the
  hosts of the other chains answer 421; otherwise all chains share the listener's table.
* The TLS inspector (reading SNI from the client's hello) only on a listener with a chain
  chosen by SNI (``chosen_by_sni``): a listener with one certificate, named or not, pays
  nothing for it, and a second certificate replaces the listener (a drain).
* TLS passthrough: one filter chain per L4 route, chosen by SNI, forwarding bytes (tcp_proxy).
  An HTTPS listener's own L4 routes (an HTTPS and a TLS Gateway listener on one port, or Ingress
  hosts with ``podway.io/tls-passthrough``) become passthrough chains beside the terminating
  ones; an SNI name a certificate already serves stays terminating. An L4 route with a
  ``certificate`` (TLSRoute on a ``Terminate`` listener) terminates TLS on its chain and
  forwards the decrypted bytes (no ALPN offered: the bytes are not HTTP to the engine).
* Client address (HTTP, HTTPS): ``use_remote_address`` with ``xff_num_trusted_hops`` from the
  listener; X-Real-IP is set in every route table (``routes``) from that address.
* TCP: tcp_proxy over the first L4 route's pools (weighted), or, with client-IP affinity over
  alike pools, their split cluster; a failed connect to a member is tried again on another
  (``CONNECT_ATTEMPTS``). UDP: udp_proxy routed to the first L4 route's pool, or, with
  several weighted pools, to their split cluster (``podway.envoy.config.split``: Envoy's UDP
  proxy routes to one cluster).
* Transparent (``Listener.transparent``): on TCP and TLS the original-source listener filter, on
  UDP the proxy's ``use_original_src_ip``, make the engine connect to the members from the
  client's address (``IP_TRANSPARENT``: the engine needs ``CAP_NET_ADMIN``; UDP keeps the address,
  not the port). The engine host's rules (``podway.envoy.engine.transparent``) route the replies of
  those connections to the engine's sockets; the pods' replies must reach the engine host.
* A TCP share whose backend cannot be used keeps its weight and points at ``NO_POOL``, a
  cluster that never exists: its share of connections is closed, as the Gateway API asks of
  invalid backends, instead of being moved onto the valid ones.
"""

from __future__ import annotations

from envoy.config.core.v3 import address_pb2, base_pb2
from envoy.config.listener.v3 import listener_components_pb2 as lc
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.listener.original_src.v3 import original_src_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2 as udp_route_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import udp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from google.protobuf import wrappers_pb2

from podway.envoy.config import oauth2
from podway.envoy.config.access import manager_filters
from podway.envoy.config.common import ads_source, pack, stat_prefix
from podway.envoy.config.scoped import use_scopes
from podway.envoy.config.split import split_name, split_route
from podway.ir import L4Route, Listener, TLSCertificate
from podway.ir import ListenerProtocol as Protocol

_TLS_VERSIONS = {"1.0": common_pb2.TlsParameters.TLSv1_0,
                 "1.1": common_pb2.TlsParameters.TLSv1_1,
                 "1.2": common_pb2.TlsParameters.TLSv1_2,
                 "1.3": common_pb2.TlsParameters.TLSv1_3}
CORS_FILTER = "envoy.filters.http.cors"
#: Used when an L4 route has no usable pool: connections are closed (no such cluster).
NO_POOL = "podway/no-pool"
#: Socket mark of the engine's transparent upstream connections (kube-proxy uses 0x4000 and
#: 0x8000, Calico the upper 16 bits), and the mark their replies get on the engine host.
ORIGINAL_SOURCE_MARK = 0x1000
REPLY_MARK = 0x2000
#: The policy-routing table that delivers marked replies to the engine's local sockets.
REPLY_TABLE = 7100


def listener(ir: Listener, *, tcp_split: bool = False, scoped: bool = False,
             dynamic_stats: bool = False, reuse_port: bool = False) -> listener_pb2.Listener:
    """``tcp_split``: a TCP listener forwards to its route's split cluster (the builder decides:
    ``split.split_route`` needs the pools). ``scoped``: an HTTP listener takes its routes from
    scopes, one per host (``podway.envoy.config.scoped``; the builder decides).
    ``dynamic_stats``: the router keeps Envoy's per-pool response-code and timing stats
    (``_router``). ``reuse_port``: see below."""
    out = listener_pb2.Listener(name=ir.name, stat_prefix=stat_prefix(ir.name))
    # One owner per address and port on a host: without SO_REUSEPORT a second Envoy (another
    # Podway instance) cannot bind what this one serves — it refuses the listener instead of
    # splitting the traffic between two configurations. Envoy's own listener updates and hot
    # restart hand the bound socket over rather than binding again, so they are unaffected.
    # ``reuse_port`` (the controller's --listener-reuse-port, which the chart sets): engines
    # of one configuration replace each other on a host without a gap — the new pod's Envoy
    # binds beside the old one, which drains and stops (the kernel shares a port only among
    # sockets of one user, so another user's process still cannot split it).
    out.enable_reuse_port.value = reuse_port
    socket = out.address.socket_address
    socket.address = ir.address
    socket.port_value = ir.port
    if ir.protocol is Protocol.UDP:
        socket.protocol = address_pb2.SocketAddress.UDP
        out.udp_listener_config.SetInParent()
        out.listener_filters.append(_udp_proxy(ir))
        return out
    if ir.protocol is Protocol.HTTP:
        out.filter_chains.append(lc.FilterChain(filters=[_http_manager(
            ir, scoped=scoped, dynamic_stats=dynamic_stats)]))
    elif ir.protocol is Protocol.HTTPS:
        _https_chains(out, ir, dynamic_stats=dynamic_stats)
        # Passthrough beside termination (HTTPS and TLS sharing a port): SNI names a
        # certificate serves stay terminating; the engine picks one chain per name.
        taken = {n for _, _, names in sni_tables(ir) for n in names}
        _passthrough_chains(out, ir, taken)
        _drop_redundant(out)
    elif ir.protocol is Protocol.TLS:
        _passthrough_chains(out, ir)
    else:  # TCP
        route = ir.l4_routes[0] if ir.l4_routes else None
        out.filter_chains.append(lc.FilterChain(filters=[
            _tcp_proxy(ir.name, route, cluster=split_name(ir) if tcp_split else None)]))
    if chosen_by_sni(out):
        out.listener_filters.append(_tls_inspector())
    if ir.transparent and ir.protocol in (Protocol.TCP, Protocol.TLS):
        out.listener_filters.insert(0, lc.ListenerFilter(
            name="envoy.filters.listener.original_src",
            typed_config=pack(original_src_pb2.OriginalSrc(mark=ORIGINAL_SOURCE_MARK))))
    return out


def chosen_by_sni(out: listener_pb2.Listener) -> bool:
    """Whether a chain of ``out`` is chosen by what the client's hello says (SNI, ALPN): only
    then does the listener read the hello before the chain (the TLS inspector). A listener
    with its default chain alone (one certificate, named or not: ``_drop_redundant``; one
    passthrough route without hostnames) does without: the inspector was 3.1 % of the
    instructions of a new TLS handshake (docs/performance.md). The price: the first chain
    chosen by SNI (a second certificate), or the last one leaving, changes the listener's
    filters, so Envoy replaces the listener and drains its connections instead of updating
    its chains in place (tests/e2e/test_tls_inspector.py: no request fails across it)."""
    return any(chain.filter_chain_match.server_names
               or chain.filter_chain_match.application_protocols
               or chain.filter_chain_match.transport_protocol
               for chain in out.filter_chains)


def _drop_redundant(out: listener_pb2.Listener) -> None:
    """Leave out a listener's only named chain where it equals its default chain (the same
    certificate, TLS settings and manager: one named certificate, no passthrough chain). The
    default chain then serves every SNI, as the pair did (the named one served its names, the
    default every other name, the same way), and the listener needs no TLS inspector: ~3 %
    of a new TLS handshake's instructions (docs/performance.md). A named chain beside others
    stays: a passthrough route's wildcard could otherwise take its names."""
    if len(out.filter_chains) != 1 or not out.HasField("default_filter_chain"):
        return
    named, default = out.filter_chains[0], out.default_filter_chain
    if named.filters == default.filters and named.transport_socket == default.transport_socket:
        del out.filter_chains[:]


def sni_tables(ir: Listener) -> list[tuple[TLSCertificate, str, tuple[str, ...]]]:
    """(certificate, route table name, SNI names) of each named filter chain of an HTTPS
    listener, in chain order; the default chain uses the listener's own table (``ir.name``)."""
    out: list[tuple[TLSCertificate, str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for cert in ir.certificates:
        names = tuple(h.lower() for h in cert.hostnames if h.lower() not in seen)
        seen.update(names)
        if names:  # a duplicate SNI set is rejected by Envoy; the first certificate wins
            table = f"{ir.name}/sni/{cert.name}" if ir.sni_host_check else ir.name
            out.append((cert, table, names))
    return out


def _http_manager(ir: Listener, table: str | None = None, *, scoped: bool = False,
                  dynamic_stats: bool = False) -> lc.Filter:
    manager = hcm.HttpConnectionManager(
        stat_prefix=stat_prefix(ir.name),
        codec_type=hcm.HttpConnectionManager.AUTO,
        strip_any_host_port=True,
        strip_trailing_host_dot=True,
        # The client address: the peer, or with N trusted hops the Nth address from the right
        # of X-Forwarded-For; Envoy appends the peer to X-Forwarded-For and sets
        # X-Forwarded-Proto from the connection unless the peer is a trusted hop.
        use_remote_address=wrappers_pb2.BoolValue(value=True),
        xff_num_trusted_hops=ir.xff_trusted_hops,
        normalize_path=wrappers_pb2.BoolValue(value=True),
        merge_slashes=True,
    )
    manager.rds.route_config_name = table or ir.name
    manager.rds.config_source.CopyFrom(ads_source())
    manager.upgrade_configs.append(hcm.HttpConnectionManager.UpgradeConfig(
        upgrade_type="websocket", enabled=wrappers_pb2.BoolValue(value=False)))
    # Every optional filter is switched off here and on by the routes that configure it (a
    # per-route config of a disabled filter enables it): a request of any other route pays
    # nothing for it. Present on every manager so a route gaining one never replaces the
    # listener (and never drains its connections). ``access``: the same for the others.
    manager.http_filters.append(hcm.HttpFilter(
        name=CORS_FILTER, disabled=True, typed_config=pack(cors_pb2.Cors())))
    # rate limits, client access, logins (only the policies of this listener), body limits
    manager.http_filters.extend(manager_filters(oauth2.used(ir)))
    manager.http_filters.append(_router(dynamic_stats=dynamic_stats))
    if scoped:
        use_scopes(manager)
    return lc.Filter(name="envoy.filters.network.http_connection_manager",
                     typed_config=pack(manager))


def _router(*, dynamic_stats: bool) -> hcm.HttpFilter:
    """The router. Without ``dynamic_stats`` it makes none of Envoy's per-request per-pool
    stats (``cluster.<pool>.upstream_rq_<code>``, ``_2xx``.., ``upstream_rq_time``, zone and
    canary figures): with the bounded stats (the default, ``EnvoyStats.BOUNDED``) those stats
    are refused anyway, and Envoy still composed and looked each one up per request, then
    threw it away: 9-10 % of the instructions of a tiny keep-alive request
    (docs/performance.md, "Where the tax was"). ``--envoy-stats detailed`` keeps them.

    Nor does it add its own ``x-envoy-*`` headers (``suppress_envoy_headers``): the time the
    member took (``x-envoy-upstream-service-time``) on every answer to the client, and to the
    member the timeout Envoy expects (``x-envoy-expected-rq-timeout-ms``) and a rewritten
    request's original path (``x-envoy-original-path``). Nothing of Podway's reads them, no
    other engine sends them, and they cost every request (docs/performance.md); a client's
    ``x-envoy-*`` control headers are still stripped (``use_remote_address``). ``--envoy-stats
    detailed``, the engine's diagnostic mode, keeps them beside the timing stats."""
    config = router_pb2.Router()
    config.dynamic_stats.value = dynamic_stats
    config.suppress_envoy_headers = not dynamic_stats
    return hcm.HttpFilter(name="envoy.filters.http.router", typed_config=pack(config))


def _https_chains(out: listener_pb2.Listener, ir: Listener, *, dynamic_stats: bool) -> None:
    """One chain per SNI set, and a default chain for clients without a known SNI.

    With a certificate for no hostname, the default chain serves it with the listener's own
    table. Without one, the default chain shows the first certificate and serves that
    certificate's table: a client that sent no SNI (probes, old clients) reaches the hosts
    whose certificate it was shown — no SNI is not a mismatch, so no 421.
    """
    tables = sni_tables(ir)
    default = next((c for c in ir.certificates if not c.hostnames), None)
    default_table: str | None = None
    if default is None and ir.certificates:
        default = ir.certificates[0]
        default_table = next((t for c, t, _ in tables if c.name == default.name), None)
    for cert, table, names in tables:
        chain = lc.FilterChain(name=f"{cert.name}", filters=[_http_manager(
            ir, table, dynamic_stats=dynamic_stats)])
        chain.filter_chain_match.server_names.extend(names)
        chain.transport_socket.CopyFrom(_downstream_tls(cert))
        out.filter_chains.append(chain)
    if default is not None:
        chain = lc.FilterChain(name="default", filters=[_http_manager(
            ir, default_table, dynamic_stats=dynamic_stats)])
        chain.transport_socket.CopyFrom(_downstream_tls(default))
        out.default_filter_chain.CopyFrom(chain)


def _downstream_tls(cert: TLSCertificate, *, alpn: tuple[str, ...] = ("h2", "http/1.1")
                    ) -> base_pb2.TransportSocket:
    context = tls_pb2.DownstreamTlsContext()
    common = context.common_tls_context
    common.alpn_protocols.extend(alpn)
    common.tls_certificate_sds_secret_configs.append(
        secret_pb2.SdsSecretConfig(name=cert.name, sds_config=ads_source()))
    options = cert.options
    if options.min_version or options.max_version or options.ciphers:
        params = common.tls_params
        if options.min_version:
            params.tls_minimum_protocol_version = _TLS_VERSIONS[options.min_version]
        if options.max_version:
            params.tls_maximum_protocol_version = _TLS_VERSIONS[options.max_version]
        params.cipher_suites.extend(options.ciphers)
    if options.client_ca_pem:
        validation = common.validation_context
        validation.trusted_ca.inline_string = options.client_ca_pem
        if options.client_verify_depth is not None:
            validation.max_verify_depth.value = options.client_verify_depth
        context.require_client_certificate.value = options.client_required
        if options.client_accept_untrusted:
            validation.trust_chain_verification = (
                common_pb2.CertificateValidationContext.ACCEPT_UNTRUSTED)
    return base_pb2.TransportSocket(name="envoy.transport_sockets.tls",
                                    typed_config=pack(context))


def _passthrough_chains(out: listener_pb2.Listener, ir: Listener,
                        taken: set[str] | None = None) -> None:
    seen: set[str] = set(taken or ())
    for route in ir.l4_routes:
        names = [h.lower() for h in route.hostnames if h.lower() not in seen]
        seen.update(names)
        chain = lc.FilterChain(name=route.name, filters=[_tcp_proxy(ir.name, route)])
        if route.certificate is not None:  # TLS Terminate: decrypt, then forward the bytes
            chain.transport_socket.CopyFrom(_downstream_tls(route.certificate, alpn=()))
        if names:
            chain.filter_chain_match.server_names.extend(names)
            out.filter_chains.append(chain)
        elif not route.hostnames and not out.HasField("default_filter_chain"):
            out.default_filter_chain.CopyFrom(chain)


CONNECT_ATTEMPTS = 3  # TCP: connects per client connection, on other members after a failure


def _tcp_proxy(name: str, route: L4Route | None, *, cluster: str | None = None) -> lc.Filter:
    proxy = tcp_proxy_pb2.TcpProxy(stat_prefix=stat_prefix(name))
    shares = [b for b in (route.backends if route else ()) if b.weight > 0]
    if cluster is not None:
        proxy.cluster = cluster
    elif len(shares) == 1:
        proxy.cluster = shares[0].pool or NO_POOL
    elif shares:
        for share in shares:
            proxy.weighted_clusters.clusters.append(tcp_proxy_pb2.TcpProxy.WeightedCluster.
                                                    ClusterWeight(name=share.pool or NO_POOL,
                                                                  weight=share.weight))
    else:
        proxy.cluster = NO_POOL
    if route is not None and route.client_ip_affinity:
        proxy.hash_policy.add().source_ip.SetInParent()
    # A connect that fails (a pod that stopped before its endpoint left the slice, as in a
    # rollout) is tried again on another member before the client's connection is closed,
    # as HTTP routes retry connect failures; nothing reached the member, so nothing repeats.
    proxy.max_connect_attempts.value = CONNECT_ATTEMPTS
    return lc.Filter(name="envoy.filters.network.tcp_proxy", typed_config=pack(proxy))


def _udp_proxy(ir: Listener) -> lc.ListenerFilter:
    route = ir.l4_routes[0] if ir.l4_routes else None
    pools = [b.pool for b in (route.backends if route else ()) if b.pool and b.weight > 0]
    target = split_name(ir) if split_route(ir) is not None else (pools[0] if pools else NO_POOL)
    proxy = udp_proxy_pb2.UdpProxyConfig(stat_prefix=stat_prefix(ir.name))
    action = proxy.matcher.on_no_match.action
    action.name = "route"
    action.typed_config.CopyFrom(pack(udp_route_pb2.Route(cluster=target)))
    if route is not None and route.client_ip_affinity:
        proxy.hash_policies.add().source_ip = True
    if ir.transparent:
        proxy.use_original_src_ip = True
    return lc.ListenerFilter(name="envoy.filters.udp_listener.udp_proxy",
                             typed_config=pack(proxy))


def _tls_inspector() -> lc.ListenerFilter:
    return lc.ListenerFilter(name="envoy.filters.listener.tls_inspector",
                             typed_config=pack(tls_inspector_pb2.TlsInspector()))
