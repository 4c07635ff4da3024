"""``podway controller``: watch the Kubernetes API, serve xDS to engines, write status back.

Only flags here; the wiring is ``podway.programs.controller.main``. Every bad flag and an
unreachable cluster is one line on stderr (exit status 2), never a traceback.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from podway.base.tasks import run_until_signal
from podway.cli.commands.common import (
    backend_mode_flag,
    check_address,
    check_classes,
    check_hops,
    check_loopback,
    check_nginx_config,
    check_port,
    read_npl_key,
    setup_logging,
)
from podway.cli.commands.flags import (
    BackendModeFlag,
    DashboardAddress,
    DashboardAllowRemote,
    DashboardPort,
    IngressClasses,
    NginxConfigFlag,
    OldModeFlag,
    RealIpHeader,
    XffTrustedHops,
)
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.translate import BackendMode

if TYPE_CHECKING:
    from podway.envoy.xds.server import ServerTLS
    from podway.programs.controller.engine_certs import EngineCertSettings
    from podway.programs.controller.leader import ElectionSettings
    from podway.programs.ipam import PoolKinds


def register(app: typer.Typer) -> None:
    app.command()(controller)


def controller(
    kubeconfig: Annotated[str | None, typer.Option(
        help="kubeconfig file (default: the in-cluster service account).")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    config: Annotated[Path | None, typer.Option(
        help="Live settings file (YAML; backendMode), re-read while running: a new "
        "backendMode applies without restart (docs/controller.md).")] = None,
    namespaces: Annotated[str, typer.Option(
        help="Comma-separated namespaces to watch (default: all).")] = "",
    namespace_selector: Annotated[str, typer.Option(
        help="Only namespaces whose labels match this selector (e.g. podway=on).")] = "",
    xds_listen: Annotated[str, typer.Option(
        help="Where engines connect (host:port or unix:/path). A TCP address needs TLS with "
             "client certificates (--xds-cert/--xds-key/--xds-client-ca).")] = "0.0.0.0:18000",
    xds_unauthenticated: Annotated[bool, typer.Option(
        "--xds-unauthenticated", help="Allow clear-text xDS on a loopback host:port; such "
        "engines get no Secrets (no TLS listeners).")] = False,
    listener_reuse_port: Annotated[bool, typer.Option(
        "--listener-reuse-port", help="Engines' listeners bind with SO_REUSEPORT: a new engine "
        "on a host serves beside the old one until that one has drained (a rolling update "
        "without a gap; the kernel shares a port only among one user's sockets).")] = False,
    envoy_stats: Annotated[EnvoyStats, typer.Option(
        help="The Envoy engines' --envoy-stats: detailed makes their routers keep the per-pool "
        "response-code and timing stats and add Envoy's x-envoy-* headers too (costly per "
        "request).")] = EnvoyStats.BOUNDED,
    xds_cert: Annotated[Path | None, typer.Option(help="xDS server certificate (PEM).")] = None,
    xds_key: Annotated[Path | None, typer.Option(help="xDS server private key (PEM).")] = None,
    xds_client_ca: Annotated[Path | None, typer.Option(
        help="CA of the engines' client certificates.")] = None,
    engine_account: Annotated[list[str] | None, typer.Option(
        help="USER=GROUP: engines running as this service account user "
             "(system:serviceaccount:NS:NAME) get client certificates from the controller's "
             "own CA for their node and GROUP (empty: no group), through "
             "CertificateSigningRequests of signer podway.io/engine-client; the xDS server "
             "trusts that CA beside --xds-client-ca. Repeatable; none: no signer.")] = None,
    engine_ca_secret: Annotated[str, typer.Option(
        help="The Secret holding the engines' CA (made when missing), in "
             "--engine-ca-namespace.")] = "podway-engine-ca",
    engine_ca_namespace: Annotated[str, typer.Option(
        help="Namespace of --engine-ca-secret (default: $POD_NAMESPACE, else the service "
             "account's, else default).")] = "",
    oidc_key_secret: Annotated[str, typer.Option(
        help="The Secret (in --oidc-key-namespace, made when missing) holding the key every "
             "OIDC policy's session secret derives from; empty: none, every OIDC policy is "
             "refused.")] = "podway-oidc-key",
    oidc_key_namespace: Annotated[str, typer.Option(
        help="Namespace of --oidc-key-secret (default: $POD_NAMESPACE, else the service "
             "account's, else default).")] = "",
    address: Annotated[str, typer.Option(
        help="Where listeners bind when an object names no VIP.")] = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="Port of the Ingress HTTP listener.")] = 80,
    https_port: Annotated[int, typer.Option(help="Port of the Ingress HTTPS listener.")] = 443,
    lb_address: Annotated[str | None, typer.Option(
        help="Address published in Service/Ingress status.loadBalancer when listeners bind "
             "the wildcard (the engines' address).")] = None,
    vip_pools: Annotated[Path | None, typer.Option(
        help="VIP pools (YAML/JSON, see docs/vips.md): LoadBalancer Services and Gateways get "
             "their addresses from them (IPAM).")] = None,
    vip_pools_from: Annotated[list[str] | None, typer.Option(
        help="Also read VIP pools from Kubernetes objects, live: 'vippools' (Podway's VIPPool) "
             "or 'metallb' (MetalLB's IPAddressPool in --metallb-namespace); repeatable. "
             "Turns the IPAM on.")] = None,
    metallb_namespace: Annotated[str, typer.Option(
        help="The namespace MetalLB's IPAddressPools are read from.")] = "metallb-system",
    metrics_port: Annotated[int, typer.Option(
        help="/healthz, /readyz and /metrics on this port (0: off).")] = 0,
    metrics_address: Annotated[str, typer.Option(help="Address of the metrics port.")]
    = "0.0.0.0",
    admin_socket: Annotated[Path | None, typer.Option(
        help="Serve the admin endpoint (state, config, live explain; docs/explain.md) on this "
        "unix socket; its folder must be yours alone (made 0700). Default: off.")] = None,
    dashboard_port: DashboardPort = 0,
    dashboard_address: DashboardAddress = "127.0.0.1",
    dashboard_allow_remote: DashboardAllowRemote = False,
    engine_admin: Annotated[str | None, typer.Option(
        help="A co-located engine's admin socket (unix:/path, e.g. its state folder's "
        "admin.sock): its live member health feeds explain and the dashboard. Default: they "
        "show Kubernetes readiness only.")] = None,
    xff_trusted_hops: XffTrustedHops = 0,
    x_real_ip: RealIpHeader = False,
    ingress_class: IngressClasses = None,
    nginx_config: NginxConfigFlag = None,
    leader_elect: Annotated[str, typer.Option(
        help="Elect one writer among the replicas with a coordination.k8s.io Lease (true); "
             "false: this replica always writes (run only one).")] = "true",
    lease_name: Annotated[str, typer.Option(help="The Lease's name.")] = "podway-controller",
    lease_namespace: Annotated[str, typer.Option(
        help="The Lease's namespace (default: $POD_NAMESPACE, else the service account's, "
             "else default).")] = "",
    identity: Annotated[str, typer.Option(
        help="This replica's name in the Lease (default: host name + a UUID).")] = "",
    lease_duration_s: Annotated[int, typer.Option(
        help="Seconds followers wait after the last renewal before taking the Lease (the "
             "failover time when a leader dies).")] = 15,
    renew_deadline_s: Annotated[float, typer.Option(
        help="A leader that could not renew for this long stops writing at once.")] = 10.0,
    retry_period_s: Annotated[float, typer.Option(
        help="Seconds between renewals (and between a follower's tries, jittered).")] = 2.0,
    npl_key: Annotated[Path | None, typer.Option(
        help="File with the master key of NodePortLocal signatures: the agent of each node "
             "signs with a key derived from it for that node, and only mappings signed with "
             "the key of the pod's node become members (docs/security.md).")] = None,
    npl_agent: Annotated[str, typer.Option(
        help="The agents' user (system:serviceaccount:NAMESPACE:NAME): hand each agent that "
             "asks (podway agent --npl-key-request) its own node's key. Needs --npl-key.",
    )] = "",
    npl_unsigned: Annotated[bool, typer.Option(
        "--npl-unsigned", help="Believe unsigned NodePortLocal annotations (Antrea's own "
        "agent) when nodeIP is the pod's node and the port in --npl-port-range: a tenant "
        "that may patch its pods can then point them at another port of their node.")] = False,
    npl_port_range: Annotated[str, typer.Option(
        help="The agents' node port range (their --port-range): a mapping outside it is not "
             "believed.")] = "61000-62000",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Translate the cluster's Services, Ingresses and Gateway API routes for Envoy engines."""
    from podway.base.errors import ConfigError
    from podway.base.netaddr import HostPort
    from podway.envoy.xds.server import check_bind
    from podway.kube.selectors import SelectorError, label_selector
    from podway.programs.controller.main import Controller, ControllerOptions, parse_namespaces
    from podway.programs.gc_policy import GcPolicy
    from podway.translate import TranslateOptions

    setup_logging(log_level)
    check_address("--address", address)
    if lb_address is not None:
        check_address("--lb-address", lb_address)
    check_address("--metrics-address", metrics_address)
    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    check_port("--metrics-port", metrics_port, zero_means="no health or metrics endpoint")
    check_port("--dashboard-port", dashboard_port, zero_means="no dashboard")
    check_loopback("--dashboard-address", dashboard_address,
                   allow_flag="--dashboard-allow-remote", allowed=dashboard_allow_remote)
    _check_admin_sockets(engine_admin, admin_socket)
    signer = engine_cert_settings(engine_account or [], engine_ca_secret, engine_ca_namespace)
    tls = _server_tls(xds_cert, xds_key, xds_client_ca, engine_ca=signer is not None)
    check_bind(xds_listen, tls, unauthenticated=xds_unauthenticated)
    if config is not None:
        from podway.programs.controller.config import load_config

        load_config(config)  # a missing or bad file is one line now, not after connecting

    vips = vip_settings(vip_pools, vip_pools_from or [], metallb_namespace)
    election = _election(leader_elect, namespace=lease_namespace, name=lease_name,
                         identity=identity, lease_duration_s=lease_duration_s,
                         renew_deadline_s=renew_deadline_s, retry_period_s=retry_period_s)
    try:
        label_selector(namespace_selector)
    except SelectorError as exc:
        raise ConfigError(f"--namespace-selector: {exc}") from None
    npl, npl_warnings = npl_settings(npl_key, unsigned=npl_unsigned, port_range=npl_port_range,
                                     agent=npl_agent)
    opts = ControllerOptions(
        kubeconfig=kubeconfig, context=context, namespaces=parse_namespaces(namespaces),
        namespace_selector=namespace_selector,
        translate=TranslateOptions(address=address, http_port=http_port, https_port=https_port,
                                   mode=backend_mode_flag(backend_mode, mode,
                                                          default=BackendMode.NODEPORTLOCAL),
                                   takeover_classes=check_classes("--ingress-class",
                                                                  ingress_class),
                                   real_ip_header=x_real_ip, nginx=check_nginx_config(
                                       "--nginx-config", nginx_config),
                                   xff_trusted_hops=check_hops("--xff-trusted-hops",
                                                               xff_trusted_hops),
                                   **npl),
        xds_address=xds_listen, xds_tls=tls, xds_unauthenticated=xds_unauthenticated,
        metrics_address=metrics_address, metrics_port=metrics_port, lb_address=lb_address,
        **vips, admin_socket=admin_socket, detailed_stats=envoy_stats is EnvoyStats.DETAILED,
        dashboard=HostPort(dashboard_address, dashboard_port) if dashboard_port else None,
        engine_admin=engine_admin, election=election, config=config, gc=GcPolicy(),
        warnings=npl_warnings, npl_agent_user=npl_agent or None, engine_certs=signer,
        listener_reuse_port=listener_reuse_port, **_oidc_key(oidc_key_secret, oidc_key_namespace))
    asyncio.run(run_until_signal(Controller(opts).run()))


def _oidc_key(secret: str, namespace: str) -> dict[str, Any]:
    """Where the OIDC session key lives (``--oidc-key-secret``, ``--oidc-key-namespace``)."""
    from podway.programs.controller.leader import default_namespace

    return {"oidc_key_secret": (namespace or default_namespace(), secret) if secret else None}


def npl_settings(path: Path | None, *, unsigned: bool, port_range: str, agent: str = ""
                 ) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``TranslateOptions`` fields for the NodePortLocal flags: signed mappings with
    ``--npl-key``, node and range checks only with ``--npl-unsigned`` (Antrea's agent signs
    nothing), and with neither no mapping at all (fail closed, and a warning that says how to
    open it); and the warnings to log once connected."""
    from podway.base.errors import ConfigError
    from podway.programs.agent.ports import PortRange, PortRangeError
    from podway.translate import NplTrust

    if path is not None and unsigned:
        raise ConfigError("--npl-key and --npl-unsigned exclude each other")
    if agent and path is None:
        raise ConfigError("--npl-agent needs --npl-key (the master the agents' keys derive from)")
    try:
        parsed = PortRange.parse(port_range)
    except PortRangeError as exc:
        raise ConfigError(f"--npl-port-range: {exc}") from None
    key = read_npl_key(path) if path is not None else None
    # Fail closed: without a key nothing can vouch for a mapping, and a pod's annotation is
    # whatever its writer (perhaps a tenant) put there. Believe none until told how.
    warnings = () if key is not None or unsigned else (
        "no NodePortLocal mapping is believed (fail closed): give the controller and the agents "
        "--npl-key FILE (Podway's agents sign their mappings with it), or --npl-unsigned for "
        "Antrea's agent (then a mapping is believed when its nodeIP is the pod's node and its "
        f"port in {port_range})",)
    trust = NplTrust.NODE if unsigned else NplTrust.SIGNED
    return ({"npl_trust": trust, "npl_key": key,
             "npl_port_range": (parsed.start, parsed.end)}, warnings)


def _check_admin_sockets(engine_admin: str | None, admin_socket: Path | None) -> None:
    """``--engine-admin`` names a unix socket; ``--admin-socket`` can be made."""
    from podway.base.errors import ConfigError

    if engine_admin is not None and not (engine_admin.startswith("unix:/")
                                         and len(engine_admin) > len("unix:/")):
        raise ConfigError(f"--engine-admin {engine_admin!r} is not unix:/path (an engine's "
                          "admin socket, e.g. admin.sock in its state folder)")
    if admin_socket is not None:
        from podway.readers.admin_socket import check_socket

        check_socket(admin_socket)


def engine_cert_settings(accounts: list[str], secret: str, namespace: str
                         ) -> EngineCertSettings | None:
    """The engine certificate signer ``--engine-account`` asks for (checked), or None."""
    from podway.base.errors import ConfigError
    from podway.programs.controller.leader import default_namespace

    users: dict[str, str] = {}
    for value in accounts:
        user, sep, group = value.partition("=")
        user, group = user.strip(), group.strip()
        parts = user.split(":")
        if not sep or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or \
                not all(parts[2:]):
            raise ConfigError(f"--engine-account {value!r}: give "
                              "system:serviceaccount:NAMESPACE:NAME=GROUP (GROUP may be empty)")
        if users.get(user, group) != group:
            raise ConfigError(f"--engine-account: {user} is given two engine groups")
        users[user] = group
    if not users:
        return None
    if not secret:
        raise ConfigError("--engine-ca-secret: give the Secret's name")
    from podway.programs.controller.engine_certs import EngineCertSettings  # X.509: only now

    return EngineCertSettings(users=users, namespace=namespace or default_namespace(),
                              ca_secret=secret)


def _server_tls(cert: Path | None, key: Path | None, client_ca: Path | None, *,
                engine_ca: bool = False) -> ServerTLS | None:
    """The xDS server's TLS from ``--xds-cert``/``--xds-key`` (and ``--xds-client-ca``), or
    None for plain gRPC. ``engine_ca``: the engines' own CA will be trusted (read at start),
    so client certificates are required even without ``--xds-client-ca``."""
    from podway.base.errors import ConfigError
    from podway.envoy.xds.server import ServerTLS

    if (cert is None) != (key is None):
        raise ConfigError("--xds-cert and --xds-key go together")
    if cert is None or key is None:
        return None
    try:
        return ServerTLS(cert_pem=cert.read_bytes(), key_pem=key.read_bytes(),
                         client_ca_pem=client_ca.read_bytes() if client_ca else
                         b"" if engine_ca else None)
    except OSError as exc:
        raise ConfigError(f"cannot read the xDS TLS files: {exc}") from None


def _election(leader_elect: str, *, namespace: str, name: str, identity: str,
              lease_duration_s: int, renew_deadline_s: float, retry_period_s: float
              ) -> ElectionSettings | None:
    """The Lease election ``--leader-elect`` asks for (checked), or None."""
    from podway.programs.controller.leader import (
        ElectionSettings,
        default_identity,
        default_namespace,
        parse_enabled,
    )

    if not parse_enabled("--leader-elect", leader_elect):
        return None
    election = ElectionSettings(
        namespace=namespace or default_namespace(), name=name,
        identity=identity or default_identity(), lease_duration_s=lease_duration_s,
        renew_deadline_s=renew_deadline_s, retry_period_s=retry_period_s)
    election.check()
    return election


def vip_settings(path: Path | None, kinds: list[str], metallb_namespace: str
                 ) -> dict[str, Any]:
    """``ControllerOptions`` fields for the VIP pool flags (the file is read now: a bad one is
    one line before connecting)."""
    from podway.programs.ipam import load_pools

    return {"vip_pools": load_pools(path) if path is not None else (),
            "vip_pool_kinds": pool_kinds(kinds), "metallb_namespace": metallb_namespace}


def pool_kinds(values: list[str]) -> tuple[PoolKinds, ...]:
    """``--vip-pools-from`` values; one line naming the choices on a bad one."""
    from podway.base.errors import ConfigError
    from podway.programs.ipam import PoolKinds

    choices = ", ".join(k.value for k in PoolKinds)
    out: list[PoolKinds] = []
    for value in values:
        try:
            out.append(PoolKinds(value.strip().lower()))
        except ValueError:
            raise ConfigError(f"--vip-pools-from: {value!r} is not one of {choices}") from None
    return tuple(dict.fromkeys(out))
