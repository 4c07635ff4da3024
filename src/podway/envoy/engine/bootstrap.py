"""Envoy's bootstrap: who it is, where its admin listens, and where to fetch everything else.

The bootstrap holds no listeners or pools: all of that comes over ADS, so one bootstrap serves
every configuration and Envoy never needs a restart to change what it serves. The admin interface
listens on a unix socket with mode 0600 in the engine's private state folder (it can dump secrets
and stop the process): never on TCP, where any local user could reach it.

Envoy retries a lost xDS stream quickly (0.25 s doubling to 2 s): when Podway restarts, the
engine it left running reconnects to the new one within a couple of seconds.

``xds`` may name several controller replicas (or one DNS name that resolves to several, e.g. a
headless Service): they are the endpoints of one xDS cluster, and a lost stream is retried on
the next one (round robin), so an engine whose controller dies reconnects to another replica.
Unix sockets and host:port addresses are not mixed.

TLS to the xDS server always verifies a name: ``xds_sni`` if given, else the host of ``xds`` (an
IP literal is matched against the certificate's IP addresses and sent as no SNI); with several
hosts, any of them (IP addresses: no SNI; several different names need ``xds_sni``). A unix
socket has no host, so TLS over one needs ``xds_sni``.

X-Real-IP is an inline request header of Envoy's (``INLINE_REQUEST_HEADERS``).

Stats are bounded by default (``EnvoyStats.BOUNDED``): Envoy instantiates only the stats whose
number does not grow with the configuration's pools and routes — server, managers, xDS, the
per-listener HTTP/TCP/UDP figures and the xDS cluster's own — through the bootstrap's
``stats_matcher``. Per-cluster (per-pool) and per-virtual-host stats cost memory and time on
every config update at scale (tens of stats per cluster, created with each cluster), so they
come only with ``EnvoyStats.DETAILED`` (``--envoy-stats detailed``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from podway.base.errors import ConfigError
from podway.base.netaddr import is_ip, parse_host_port
from podway.engines.report_targets import xds_addresses
from podway.model.base import ENGINE_GROUP

XDS_CLUSTER = "podway-xds"
XDS_CLIENT_SECRET = "podway-xds-client"  # the SDS resource ``xds_client_sds`` holds


class EnvoyStats(StrEnum):
    """Which of Envoy's stats exist (see the module docstring)."""

    BOUNDED = "bounded"  # a number of stats that does not grow with pools and routes
    DETAILED = "detailed"  # every stat Envoy has, per cluster (pool) and virtual host too


# Prefixes of the stats kept in BOUNDED mode: each is one fixed set, or one set per listener.
BOUNDED_STAT_PREFIXES = (
    "server.", "runtime.", "overload.", "control_plane.", "main_thread.", "workers.",
    "cluster_manager.", "listener_manager.",
    "http.", "listener.", "tcp.", "udp.", "http1.", "http2.", "http3.",
    f"cluster.{XDS_CLUSTER}.",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapOptions:
    node_id: str
    xds: str | tuple[str, ...]  # "host:port" or "unix:/path"; several: any controller replica
    delta: bool = True  # incremental xDS (only changed resources cross the wire)
    max_connections: int = 100_000  # all listeners together; beyond it Envoy refuses new ones
    admin_path: str = ""  # admin unix socket; the engine supervisor sets it to its state folder
    xds_ca_pem: str | None = None  # set: TLS to the xDS server, verified with this CA
    xds_sni: str = ""
    xds_client_cert_pem: str | None = None
    xds_client_key_pem: str | None = None
    # A file-based SDS resource (path) with the client certificate instead of the two PEMs:
    # Envoy re-reads it when it is replaced (a renewed certificate, ``podway engine``).
    xds_client_sds: str = ""
    stats: EnvoyStats = EnvoyStats.BOUNDED
    # The engine group it serves (node metadata ``podway.io/engine-group``); "": everything.
    engine_group: str = ""
    # Envoy's initial fetch timeout of clusters and listeners, seconds (None: Envoy's 15 s;
    # 0: Envoy's init waits for the first ones). ``podway engine`` uses ENGINE_FETCH_TIMEOUT_S.
    initial_fetch_timeout_s: float | None = None


#: Request headers Envoy keeps in a slot of its own: every route table removes (or sets)
#: X-Real-IP on every request, and removing a header Envoy does not know is a search of the
#: request's header list, for which Envoy first builds an index of it: 3.7k instructions a
#: request, 2 % of a keep-alive request (docs/performance.md). In a slot it is one look.
INLINE_REQUEST_HEADERS = ("x-real-ip",)


#: A controller-served engine waits for its first clusters and listeners (``podway engine``):
#: a controller's first state can take longer than Envoy's 15 s default at 10,000 routes, and
#: a scoped listener that arrives after Envoy's init gave up cost Envoy up to about twice the
#: CPU and time to ready under load (1.0-1.36x on a quiet machine), while Envoy already said
#: LIVE without listeners (docs/performance.md, "Where Envoy's 10,000-scope cost comes
#: from"). Nothing is served either way until listeners arrive: only the control plane has them.
#: The same as the scoped route tables' (``podway.envoy.config.common.WAIT_FOR_FIRST_S``).
ENGINE_FETCH_TIMEOUT_S = 0.0


def bootstrap(opts: BootstrapOptions) -> dict[str, Any]:
    """The bootstrap as plain data (Envoy reads it as JSON)."""
    ads_source: dict[str, Any] = {"ads": {}, "resource_api_version": "V3"}
    if opts.initial_fetch_timeout_s is not None:
        ads_source["initial_fetch_timeout"] = f"{opts.initial_fetch_timeout_s:g}s"
    config: dict[str, Any] = {
        "node": {"id": opts.node_id, "cluster": "podway",
                 **({"metadata": {ENGINE_GROUP: opts.engine_group}}
                    if opts.engine_group else {})},
        **({"admin": admin_config(opts.admin_path)} if opts.admin_path else {}),
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if opts.delta else "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {
                    "cluster_name": XDS_CLUSTER,
                    "retry_policy": {"retry_back_off": {"base_interval": "0.25s",
                                                        "max_interval": "2s"}}}}],
            },
            "cds_config": ads_source,
            "lds_config": ads_source,
        },
        "static_resources": {"clusters": [_xds_cluster(opts)]},
        "overload_manager": {"resource_monitors": [{
            "name": "envoy.resource_monitors.global_downstream_max_connections",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors."
                         "downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": opts.max_connections,
            },
        }]},
    }
    config["inline_headers"] = [{"inline_header_name": name, "inline_header_type": "REQUEST_HEADER"}
                                for name in INLINE_REQUEST_HEADERS]
    if opts.stats is EnvoyStats.BOUNDED:
        config["stats_config"] = {"stats_matcher": {"inclusion_list": {"patterns": [
            {"prefix": prefix} for prefix in BOUNDED_STAT_PREFIXES]}}}
    return config


def admin_config(path: str) -> dict[str, Any]:
    """Admin on a unix socket only its owner (and root) may connect to."""
    return {"address": {"pipe": {"path": path, "mode": 0o600}}}




def _xds_cluster(opts: BootstrapOptions) -> dict[str, Any]:
    kind = "STATIC"
    extra: dict[str, Any] = {}
    hosts: list[str] = []
    endpoints: list[dict[str, Any]] = []
    for xds in xds_addresses(opts.xds):
        if xds.startswith("unix:"):
            address: dict[str, Any] = {"pipe": {"path": xds.removeprefix("unix:")}}
        else:
            target = parse_host_port(xds, what="xDS address")
            hosts.append(target.host)
            address = {"socket_address": {"address": target.host, "port_value": target.port}}
            if not is_ip(target.host):
                # A STATIC cluster takes IP literals only ("malformed IP address"); a name is
                # resolved, and re-resolved, by Envoy. IPv4 first: "localhost" must reach a
                # server on 127.0.0.1 even where the name also resolves to ::1.
                kind = "STRICT_DNS"
                extra = {"dns_lookup_family": "V4_PREFERRED"}
        endpoints.append({"endpoint": {"address": address}})
    cluster: dict[str, Any] = {
        "name": XDS_CLUSTER,
        "type": kind,
        **extra,
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/"
                         "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {
                    "connection_keepalive": {"interval": "30s", "timeout": "5s"}}},
            },
        },
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [{"lb_endpoints": endpoints}],
        },
    }
    if opts.xds_ca_pem is not None:
        cluster["transport_socket"] = _xds_tls(opts, opts.xds_ca_pem, hosts)
    return cluster


def _xds_tls(opts: BootstrapOptions, ca_pem: str, hosts: list[str]) -> dict[str, Any]:
    """The xDS cluster's TLS transport socket: the controller's certificate checked against
    ``ca_pem`` and the names it must carry (``--xds-sni``, else the hosts of ``--xds``)."""
    # Envoy checks a name only when told to: always tell it.
    names = [opts.xds_sni] if opts.xds_sni else list(dict.fromkeys(hosts))
    if not names:
        raise ConfigError("TLS to an xDS unix socket needs a server name to verify "
                          "(--xds-sni)")
    dns = [n for n in names if not is_ip(n)]
    if len(dns) > 1:
        raise ConfigError("several --xds host names: give --xds-sni, the name on every "
                          "controller's certificate (one SNI is sent to all of them)")
    validation: dict[str, Any] = {
        "trusted_ca": {"inline_string": ca_pem},
        "match_typed_subject_alt_names": [
            {"san_type": "IP_ADDRESS" if is_ip(n) else "DNS", "matcher": {"exact": n}}
            for n in names]}
    common: dict[str, Any] = {"validation_context": validation}
    if opts.xds_client_sds:
        common["tls_certificate_sds_secret_configs"] = [{
            "name": XDS_CLIENT_SECRET, "sds_config": {
                "path_config_source": {"path": opts.xds_client_sds, "watched_directory": {
                    "path": os.path.dirname(opts.xds_client_sds)}},
                "resource_api_version": "V3"}}]
    elif opts.xds_client_cert_pem and opts.xds_client_key_pem:
        common["tls_certificates"] = [{
            "certificate_chain": {"inline_string": opts.xds_client_cert_pem},
            "private_key": {"inline_string": opts.xds_client_key_pem}}]
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/"
                     "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": dns[0] if dns else "",  # SNI is never an IP
            "common_tls_context": {**common, "alpn_protocols": ["h2"]},
        },
    }
