"""``podway config dump``: the IR and the xDS resources, as YAML.

From a running instance (``--instance``, ``--state-dir`` or ``--admin-socket``: exactly what it
pushes) or a folder (``--manifests``: what it would push). TLS private keys never appear:
certificates are shown by name and fingerprint, xDS secrets by name and digest.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.console import Console

from podway.cli.commands.common import backend_mode_flag
from podway.cli.commands.explain import (
    InstanceOption,
    ManifestsOption,
    SocketOption,
    StateDirOption,
    live_socket,
    load_manifests,
)
from podway.cli.commands.flags import BackendModeFlag, OldModeFlag
from podway.translate import BackendMode

config_app = typer.Typer(help="Show the configuration Podway serves.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")


@config_app.command()
def dump(
    manifests: ManifestsOption = None,
    admin_socket: SocketOption = None,
    instance: InstanceOption = "default",
    state_dir: StateDirOption = None,
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    only: Annotated[str | None, typer.Option(
        help="Only 'ir', 'xds', 'kernel' (the kernel engine's nftables ruleset) or 'haproxy' "
             "(a running HAProxy engine's haproxy.cfg and maps).")] = None,
) -> None:
    """Print the IR, every xDS resource (listeners, routes, clusters, endpoints, secrets), the
    kernel engine's nftables ruleset when it serves something and a running HAProxy engine's
    haproxy.cfg and maps."""
    from podway.base.errors import ConfigError
    from podway.ir.dump import dump_yaml

    socket = live_socket(manifests=manifests, admin_socket=admin_socket, instance=instance,
                         state_dir=state_dir)
    if only not in (None, "ir", "xds", "kernel", "haproxy"):
        raise ConfigError(f"--only must be 'ir', 'xds', 'kernel' or 'haproxy', not {only!r}")
    err = Console(stderr=True)
    with err.status("building the configuration…"):
        if manifests is not None:
            data = local_dump(load_manifests(manifests, mode=backend_mode_flag(
            backend_mode, mode, default=BackendMode.CLUSTERIP)).ir)
        else:
            from podway.readers.admin_api import get_json

            assert socket is not None
            data = asyncio.run(get_json(socket, "/config"))
    out = {k: v for k, v in data.items() if only is None or k in (only, "generation")}
    typer.echo(dump_yaml(out), nl=False)


def local_dump(ir: Any) -> dict[str, Any]:
    """The ``GET /config`` shape for an IR built here."""
    from podway.envoy.config import Builder
    from podway.ir.dump import to_data
    from podway.kernel.plan import plan
    from podway.kernel.ruleset import full
    from podway.readers.admin_api import xds_data

    data = {"ir": to_data(ir), "xds": xds_data(Builder().build(ir))}
    services, _ = plan(ir, lambda _, __: True, every_l4=False)  # unchecked: every member
    if services:
        data["kernel"] = full(services)
    return data
