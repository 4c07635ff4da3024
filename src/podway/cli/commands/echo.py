"""``podway echo``: run the echo workload (HTTP/1.1 + h2c, or TCP/UDP echo)."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer

from podway.base.errors import ConfigError, EnvironmentProblem
from podway.base.tasks import run_until_signal
from podway.cli.commands.common import check_address, check_port, setup_logging


def register(app: typer.Typer) -> None:
    app.command()(echo)


def echo(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    address: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    tcp: Annotated[bool, typer.Option("--tcp", help="TCP echo instead of HTTP.")] = False,
    udp: Annotated[bool, typer.Option("--udp", help="UDP echo (with --tcp: both).")] = False,
    proxy_protocol: Annotated[bool, typer.Option(
        "--proxy-protocol", help="With --tcp: each connection starts with a PROXY protocol "
        "v2 header, whose source whoami reports as the client.")] = False,
    name: Annotated[str, typer.Option(help="Name to answer with (default: pod or host).")] = "",
    pod: Annotated[str, typer.Option(help="Pod name (default: $POD_NAME).")] = "",
    namespace: Annotated[str, typer.Option(help="Namespace (default: $POD_NAMESPACE).")] = "",
    node: Annotated[str, typer.Option(help="Node name (default: $NODE_NAME).")] = "",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Answer every request with JSON describing it (name, pod, client, headers, protocol)."""
    from podway.tools.echo import Identity
    from podway.tools.echo.server import EchoOptions, serve

    setup_logging(log_level)
    check_port("--port", port)
    check_address("--address", address)
    if proxy_protocol and not tcp:
        raise ConfigError("--proxy-protocol needs --tcp (the HTTP echo reports X-Real-IP)")
    identity = Identity.from_env(name=name, pod=pod, namespace=namespace, node=node)
    opts = EchoOptions(address=address, port=port, tcp=tcp, udp=udp, identity=identity,
                       proxy_protocol=proxy_protocol)

    async def main() -> None:
        try:
            await serve(opts)
        except OSError as exc:  # the port is taken, the address is not ours, …
            raise EnvironmentProblem(
                f"cannot listen on {address}:{port}: "
                f"{os.strerror(exc.errno) if exc.errno else exc} "
                "(stop what uses it, or pass another --port/--address)") from exc

    asyncio.run(run_until_signal(main()))
