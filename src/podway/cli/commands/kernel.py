"""``podway kernel``: the kernel engine's table on this host — ``dump`` it, read its
per-member ``counters``, ``cleanup`` (remove it). The engine itself runs with
``podway run --engine kernel``."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

kernel_app = typer.Typer(name="kernel", help="The kernel L4 engine's nftables table on this host.",
                         no_args_is_help=True)

Netns = Annotated[str | None, typer.Option(help="Act in this network namespace.", hidden=True)]


def register(app: typer.Typer) -> None:
    app.add_typer(kernel_app)


@kernel_app.command()
def dump(netns: Netns = None) -> None:
    """Print the installed nftables table (exit 1 when there is none)."""
    from podway.programs.kernel import dump as read

    text = asyncio.run(read(netns=netns))
    if text is None:
        typer.echo("no kernel engine table on this host", err=True)
        raise typer.Exit(1)
    typer.echo(text, nl=False)


@kernel_app.command()
def counters(netns: Netns = None) -> None:
    """Connections to each member and, when the engine runs with --member-traffic-counters,
    the packets and bytes forwarded to and from it (both directions)."""
    from podway.programs.kernel import counters as read

    for c in asyncio.run(read(netns=netns)):
        shown = [f"{name}={value}" for name, value in (
            ("connections", c.connections), ("packets", c.packets), ("bytes", c.bytes))
            if value is not None]
        typer.echo(f"{c.protocol} {c.address}:{c.port} {' '.join(shown)}")


@kernel_app.command()
def cleanup(netns: Netns = None) -> None:
    """Remove the kernel engine's table (its DNAT, SNAT and counters); established flows
    keep their translation until they end."""
    from podway.programs.kernel import cleanup as remove

    removed = asyncio.run(remove(netns=netns))
    typer.echo("removed the kernel engine's table" if removed else "nothing to remove")
