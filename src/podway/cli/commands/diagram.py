"""``podway diagram``: the traffic path as Mermaid text, Graphviz DOT, or an SVG/PNG image.

From a folder (``--manifests``) or a running instance (``--instance``, ``--state-dir`` or
``--admin-socket``; it adds the engine's live member health). SVG and PNG are rendered by
Graphviz's ``dot`` (Debian package ``graphviz``); Mermaid and DOT need nothing.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from podway.base.errors import ConfigError, EnvironmentProblem
from podway.cli.commands.common import backend_mode_flag
from podway.cli.commands.explain import (
    InstanceOption,
    ManifestsOption,
    SocketOption,
    StateDirOption,
    fetch_live,
    live_socket,
    load_manifests,
)
from podway.cli.commands.flags import BackendModeFlag, OldModeFlag
from podway.translate import BackendMode


class Format(StrEnum):
    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PNG = "png"


def register(app: typer.Typer) -> None:
    app.command()(diagram)


def diagram(
    output_format: Annotated[Format, typer.Option("--format", help="Output format.")]
    = Format.MERMAID,
    host: Annotated[str | None, typer.Option(help="Only what serves this host name.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write here instead of standard output.")] = None,
    manifests: ManifestsOption = None,
    admin_socket: SocketOption = None,
    instance: InstanceOption = "default",
    state_dir: StateDirOption = None,
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    engine: Annotated[str, typer.Option(
        help="The engine serving the listeners (as `podway run --engine`): envoy, haproxy or "
             "kernel (every TCP/UDP listener it can serve goes to the kernel). Listeners "
             "annotated podway.io/engine: kernel are drawn as the kernel engine's "
             "whatever this says.")] = "envoy",
) -> None:
    """Draw client → listener → hosts → routes → pools → members → nodes/pods."""
    from podway.readers.explain.diagram import ENGINES, dot, graph, mermaid

    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")

    socket = live_socket(manifests=manifests, admin_socket=admin_socket, instance=instance,
                         state_dir=state_dir)
    if output_format is Format.PNG and output is None and sys.stdout.isatty():
        raise ConfigError("--format png writes binary data: give --output FILE.png")
    if manifests is not None:
        chosen = backend_mode_flag(backend_mode, mode, default=BackendMode.CLUSTERIP)
        loaded = load_manifests(manifests, mode=chosen, kernel_l4=engine == "kernel")
        g = graph(loaded.ir, host=host, mode=str(chosen), engine=engine)
    else:
        assert socket is not None
        live = asyncio.run(fetch_live(socket))
        g = graph(live.ir, host=host, mode=live.mode, health=live.health, engine=engine)
    if not g.edges:
        raise ConfigError(f"nothing serves {host!r}" if host else "nothing is served")
    data: bytes
    if output_format is Format.MERMAID:
        data = mermaid(g).encode()
    elif output_format is Format.DOT:
        data = dot(g).encode()
    else:
        data = render(dot(g), str(output_format))
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write_bytes(data)


def render(dot_text: str, fmt: str) -> bytes:
    """``dot -T<fmt>`` of a DOT graph; ``EnvironmentProblem`` when Graphviz is missing."""
    binary = shutil.which("dot")
    if binary is None:
        raise EnvironmentProblem("Graphviz is not installed (`dot` not found; Debian: apt "
                                 "install graphviz); --format mermaid or dot need nothing")
    done = subprocess.run([binary, f"-T{fmt}"], input=dot_text.encode(), capture_output=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise EnvironmentProblem(f"dot -T{fmt} failed: {message[-1] if message else '?'}")
    return done.stdout
