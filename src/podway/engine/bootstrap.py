"""Envoy's bootstrap: who it is, where its admin listens, and where to fetch everything else.

The bootstrap holds no listeners or pools: all of that comes over ADS, so one bootstrap serves
every configuration and Envoy never needs a restart to change what it serves. The admin interface
binds loopback only (it can dump secrets and stop the process), on an ephemeral port that Envoy
writes to ``admin_address_path``.

TLS to the xDS server always verifies a name: ``xds_sni`` if given, else the host of ``xds`` (an
IP literal is matched against the certificate's IP addresses and sent as no SNI). A unix socket
has no host, so TLS over one needs ``xds_sni``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from podway.errors import ConfigError
from podway.netaddr import parse_host_port

XDS_CLUSTER = "podway-xds"


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapOptions:
    node_id: str
    xds: str  # "host:port" or "unix:/path"
    delta: bool = True  # incremental xDS (only changed resources cross the wire)
    max_connections: int = 100_000  # all listeners together; beyond it Envoy refuses new ones
    admin_port: int = 0  # 0: ephemeral, read back from the admin address file
    xds_ca_pem: str | None = None  # set: TLS to the xDS server, verified with this CA
    xds_sni: str = ""
    xds_client_cert_pem: str | None = None
    xds_client_key_pem: str | None = None


def bootstrap(opts: BootstrapOptions) -> dict[str, Any]:
    """The bootstrap as plain data (Envoy reads it as JSON)."""
    ads_source = {"ads": {}, "resource_api_version": "V3"}
    return {
        "node": {"id": opts.node_id, "cluster": "podway"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1",
                                                 "port_value": opts.admin_port}}},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if opts.delta else "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
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


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _xds_cluster(opts: BootstrapOptions) -> dict[str, Any]:
    kind = "STATIC"
    extra: dict[str, Any] = {}
    host = ""
    if opts.xds.startswith("unix:"):
        address: dict[str, Any] = {"pipe": {"path": opts.xds.removeprefix("unix:")}}
    else:
        target = parse_host_port(opts.xds, what="xDS address")
        host = target.host
        address = {"socket_address": {"address": host, "port_value": target.port}}
        if not is_ip(host):
            # A STATIC cluster takes IP literals only ("malformed IP address"); a name is
            # resolved, and re-resolved, by Envoy. IPv4 first: "localhost" must reach a server on
            # 127.0.0.1 even where the name also resolves to ::1.
            kind = "STRICT_DNS"
            extra = {"dns_lookup_family": "V4_PREFERRED"}
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
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
    }
    if opts.xds_ca_pem is not None:
        name = opts.xds_sni or host  # Envoy checks a name only when told to: always tell it
        if not name:
            raise ConfigError("TLS to an xDS unix socket needs a server name to verify "
                              "(--xds-sni)")
        san_type = "IP_ADDRESS" if is_ip(name) else "DNS"
        validation: dict[str, Any] = {
            "trusted_ca": {"inline_string": opts.xds_ca_pem},
            "match_typed_subject_alt_names": [{"san_type": san_type,
                                               "matcher": {"exact": name}}]}
        common: dict[str, Any] = {"validation_context": validation}
        if opts.xds_client_cert_pem and opts.xds_client_key_pem:
            common["tls_certificates"] = [{
                "certificate_chain": {"inline_string": opts.xds_client_cert_pem},
                "private_key": {"inline_string": opts.xds_client_key_pem}}]
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/"
                         "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": "" if san_type == "IP_ADDRESS" else name,  # SNI is never an IP
                "common_tls_context": {**common, "alpn_protocols": ["h2"]},
            },
        }
    return cluster
