"""Flags several commands share, declared once: ``run``, ``validate`` and ``controller`` take the
same translation settings, ``run`` and ``controller`` the same dashboard flags, and their help must
not drift apart (typer reads the metadata of each ``Annotated`` alias)."""

from typing import Annotated

import typer

from podway.cli.commands.common import XFF_HELP
from podway.translate import BackendMode

ManifestAddresses = Annotated[bool, typer.Option(
    "--manifest-addresses", help="Bind the VIPs and Gateway addresses manifests name "
    "(default: every listener binds --address).")]
StrictHostOwnership = Annotated[bool, typer.Option(
    "--strict-host-ownership", help="Refuse rules for a host another namespace's older "
    "Ingress owns (default: serve them and warn both).")]
# One name for the backend mode in every command (``--backend-mode``); its default differs by
# command (``run``, ``validate``, ``explain``, ``diagram``, ``config dump``: clusterip, as there is
# no agent to allocate NodePortLocal ports; ``controller``: nodeportlocal), so each command
# passes it to ``backend_mode_flag``. ``--mode`` is the old name, hidden, and warns.
BackendModeFlag = Annotated[BackendMode | None, typer.Option(
    "--backend-mode", help="How Service pods become pool members: nodeport, clusterip or "
    "nodeportlocal; a Service's podway.io/backend-mode annotation overrides it "
    "(docs/reference.md#backend-modes). Default: clusterip (nodeportlocal for `controller`).",
    show_default=False)]
OldModeFlag = Annotated[BackendMode | None, typer.Option(
    "--mode", hidden=True, help="Deprecated name of --backend-mode.")]
XffTrustedHops = Annotated[int, typer.Option(help=XFF_HELP)]
RealIpHeader = Annotated[bool, typer.Option(
    "--x-real-ip", help="Set X-Real-IP to the client address on every HTTP/HTTPS listener "
    "(default: only on the Ingress listeners with --ingress-class; it costs every request).")]
TlsMinVersion = Annotated[str | None, typer.Option(
    help="Lowest TLS version HTTPS listeners accept: 1.0-1.3 (default: the engine's, 1.2).")]
TlsMaxVersion = Annotated[str | None, typer.Option(
    help="Highest TLS version HTTPS listeners accept (default: 1.3).")]
TlsCiphers = Annotated[str | None, typer.Option(
    help="Comma-separated TLS 1.2 cipher suites, OpenSSL names (default: the engine's).")]
MemberTrafficCounters = Annotated[bool, typer.Option(
    "--member-traffic-counters", help="Kernel engine: also count packets and bytes per member "
    "(metrics podway_kernel_member_packets_total/bytes_total). It costs every forwarded packet "
    "a lookup (docs/kernel.md); connections per member are always counted, at no such cost.")]
DashboardPort = Annotated[int, typer.Option(
    help="Serve the live dashboard on this port (0: off).")]
DashboardAddress = Annotated[str, typer.Option(
    help="Where the dashboard binds; loopback unless --dashboard-allow-remote.")]
DashboardAllowRemote = Annotated[bool, typer.Option(
    "--dashboard-allow-remote", help="Allow a non-loopback --dashboard-address (the page has "
    "no login: put it behind your own access control).")]
IngressClasses = Annotated[list[str] | None, typer.Option(
    "--ingress-class", help="Also serve Ingresses of this class (repeatable), whichever "
    "controller its IngressClass names, e.g. nginx: take over ingress-nginx's Ingresses and "
    "serve their nginx.ingress.kubernetes.io annotations (docs/migrate-from-ingress-nginx.md).")]
NginxConfigFlag = Annotated[list[str] | None, typer.Option(
    "--nginx-config", help="An ingress-nginx ConfigMap setting for the --ingress-class "
    "Ingresses, KEY=VALUE (repeatable): hsts, hsts-max-age, hsts-include-subdomains, "
    "hsts-preload (default: ingress-nginx's, HSTS on).", show_default=False)]
