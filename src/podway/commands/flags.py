"""Flags several commands share, declared once: ``run``, ``validate`` and ``controller`` take the
same translation settings, and their help must not drift apart (typer reads the metadata of each
``Annotated`` alias)."""

from typing import Annotated

import typer

from podway.commands.common import XFF_HELP

ManifestAddresses = Annotated[bool, typer.Option(
    "--manifest-addresses", help="Bind the VIPs and Gateway addresses manifests name "
    "(default: every listener binds --address).")]
StrictHostOwnership = Annotated[bool, typer.Option(
    "--strict-host-ownership", help="Refuse rules for a host another namespace's older "
    "Ingress owns (default: serve them and warn both).")]
XffTrustedHops = Annotated[int, typer.Option(help=XFF_HELP)]
TlsMinVersion = Annotated[str | None, typer.Option(
    help="Lowest TLS version HTTPS listeners accept: 1.0-1.3 (default: the engine's, 1.2).")]
TlsMaxVersion = Annotated[str | None, typer.Option(
    help="Highest TLS version HTTPS listeners accept (default: 1.3).")]
TlsCiphers = Annotated[str | None, typer.Option(
    help="Comma-separated TLS 1.2 cipher suites, OpenSSL names (default: the engine's).")]
