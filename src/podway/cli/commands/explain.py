"""``podway explain URL``: why a request is served, or answers 404, 421, 500 or 503.

Against a folder (``--manifests DIR``, loaded and translated as ``podway validate`` does) or a
running instance (default: ``--instance default``; or ``--state-dir DIR``, ``--admin-socket
PATH``), which adds the engine's live member health and refusals. Exit status 0 when every
outcome is served or redirected, 1 when any is an error or a closed connection, 2 when the
command cannot do its job (bad URL or flag, unreachable socket).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from podway.base.errors import ConfigError
from podway.cli.commands.common import backend_mode_flag
from podway.cli.commands.flags import BackendModeFlag, OldModeFlag
from podway.ir import IR
from podway.translate import BackendMode, Problem

ManifestsOption = Annotated[Path | None, typer.Option(
    help="Folder (or file) of manifests, loaded as `podway validate` does.", exists=True)]
SocketOption = Annotated[Path | None, typer.Option(
    help="Admin socket of a running instance (default: podway.sock in the state folder of "
    "--instance / --state-dir).")]
InstanceOption = Annotated[str, typer.Option(
    help="The running instance to ask (as `podway run --instance`).")]
StateDirOption = Annotated[Path | None, typer.Option(
    help="The running instance's state folder (as `podway run --state-dir`).")]


def register(app: typer.Typer) -> None:
    app.command()(explain)


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a folder of manifests translates to (the ``--manifests`` side of the commands)."""

    ir: IR
    problems: tuple[Problem, ...]
    load_errors: tuple[str, ...]


def load_manifests(path: Path, *, mode: BackendMode, address: str = "0.0.0.0",
                   http_port: int = 80, https_port: int = 443, kernel_l4: bool = False) -> Loaded:
    """Load and translate a folder exactly as ``podway validate`` does (``kernel_l4``: as
    ``podway run --engine kernel`` does, every L4 listener the kernel can serve is its)."""
    from podway.cli.commands.common import check_address, check_port
    from podway.ir import EngineKind
    from podway.model import Snapshot
    from podway.sources.files import load_paths
    from podway.translate import TranslateOptions, translate

    check_address("--address", address)
    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    with Console(stderr=True).status(f"loading and translating {path}…"):  # big folders: seconds
        loaded = load_paths([path])
        result = translate(Snapshot.of_objects(loaded.objects), TranslateOptions(
            address=address, http_port=http_port, https_port=https_port, mode=mode,
            l4_engine=EngineKind.KERNEL if kernel_l4 else EngineKind.ENVOY,
            oidc_key=os.urandom(32)))  # (any key: OIDC judged as a serving Podway would)
    return Loaded(ir=result.ir, problems=result.problems,
                  load_errors=tuple(str(e) for e in loaded.errors))


@dataclass(frozen=True, slots=True)
class Live:
    """What a running instance serves, from its admin socket."""

    ir: IR
    mode: str
    health: dict[str, dict[str, str]] | None
    state: dict[str, Any]  # the whole ``GET /state`` answer


def ir_of_data(data: dict[str, Any]) -> IR:
    """The IR of ``GET /state`` (certificates come without PEM: never sent, not needed)."""
    from podway.ir.load import from_data

    for listener in data.get("listeners") or ():
        for cert in listener.get("certificates") or ():
            cert.setdefault("cert_pem", "")
            cert.setdefault("key_pem", "")
    return from_data(data)


async def fetch_live(socket: Path) -> Live:
    from podway.readers.admin_api import get_json

    state = await get_json(socket, "/state")
    health = await get_json(socket, "/health")
    return Live(ir=ir_of_data(state["ir"]), mode=state.get("mode", ""),
                health=health["pools"] if health.get("known") else None, state=state)


def live_socket(*, manifests: Path | None, admin_socket: Path | None, instance: str,
                state_dir: Path | None) -> Path | None:
    """The admin socket to ask, or None with ``--manifests`` (a folder, not a running one)."""
    if manifests is not None:
        if admin_socket is not None or state_dir is not None:
            raise ConfigError("--manifests (a folder) and --admin-socket/--state-dir (a running "
                              "instance) exclude each other")
        return None
    if admin_socket is not None:
        return admin_socket
    from podway.envoy.engine.state import default_base, instance_dir
    from podway.readers.admin_api import SOCKET_NAME

    socket = instance_dir(state_dir, instance) / SOCKET_NAME
    named = f"the instance in {socket.parent}" if state_dir is not None else (
        f"instance {instance!r} ({socket.parent})")
    if not socket.exists():
        others = sorted(f"--state-dir {p.parent}" if p.parent.name.startswith(".")
                        else f"--instance {p.parent.name}"
                        for p in default_base().glob(f"*/{SOCKET_NAME}")
                        if p.parent != socket.parent)
        running = (f"; running here: {', '.join(others)}" if others
                   else "; none runs here (start `podway run` or `podway demo`, or give "
                   "--manifests DIR to read a folder)")
        raise ConfigError(f"cannot reach the admin socket {socket}: {named} is not "
                          f"running{running}")
    # On a shared host the default instance may be someone else's: say whose answer this is.
    typer.echo(f"asking {named}", err=True)
    return socket


def explain(
    url: Annotated[str, typer.Argument(help="http://HOST[:PORT]/PATH, https://…, tls://HOST:PORT, "
                                       "tcp://VIP:PORT or udp://VIP:PORT.")],
    header: Annotated[list[str] | None, typer.Option(
        "--header", "-H", help="A request header 'Name: value' (repeatable; Host overrides "
        "the URL's).")] = None,
    method: Annotated[str, typer.Option("--method", "-X", help="HTTP method.")] = "GET",
    sni: Annotated[str | None, typer.Option(
        help="TLS server name the client sends (default: the URL's host).")] = None,
    source_ip: Annotated[str | None, typer.Option(help="The client's address.")] = None,
    manifests: ManifestsOption = None,
    admin_socket: SocketOption = None,
    instance: InstanceOption = "default",
    state_dir: StateDirOption = None,
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    address: Annotated[str, typer.Option(
        help="With --manifests: where listeners bind when an object names no VIP.")]
    = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="With --manifests: Ingress HTTP port.")] = 80,
    https_port: Annotated[int, typer.Option(help="With --manifests: Ingress HTTPS port.")]
    = 443,
    as_json: Annotated[bool, typer.Option("--json", help="Print the explanation as JSON.")]
    = False,
) -> None:
    """Walk one request through listener, TLS, virtual host, routes, pool and members."""
    from podway.readers.explain import Context, parse
    from podway.readers.explain import explain as walk
    from podway.readers.explain.render import report

    socket = live_socket(manifests=manifests, admin_socket=admin_socket, instance=instance,
                         state_dir=state_dir)
    headers = header or []
    query = parse(url, headers=headers, method=method, sni=sni, source_ip=source_ip)
    data: dict[str, Any]
    if manifests is not None:
        chosen = backend_mode_flag(backend_mode, mode, default=BackendMode.CLUSTERIP)
        loaded = load_manifests(manifests, mode=chosen, address=address, http_port=http_port,
                                https_port=https_port)
        err = Console(stderr=True)
        for error in loaded.load_errors:
            err.print(f"[red]error[/red] {escape(error)}", highlight=False, soft_wrap=True)
        data = walk(loaded.ir, query, Context(problems=loaded.problems, mode=str(chosen))
                    ).to_data()
    else:
        assert socket is not None
        from podway.readers.admin_api import get_json

        params = [("url", url), ("method", method)] + [("header", h) for h in headers]
        params += [("sni", sni)] if sni else []
        params += [("source_ip", source_ip)] if source_ip else []
        data = asyncio.run(get_json(socket, "/explain", params))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        from podway.cli.commands.common import stdout_console

        stdout_console().print(report(data))
    classes = {o["status_class"] for o in data["verdict"]["outcomes"]}
    if not classes <= {"2xx", "3xx"}:
        raise typer.Exit(1)
