"""``podway agent``: run the NodePortLocal agent on one node; ``podway agent cleanup`` removes
every kernel rule it made (both backends, whichever exist). Flags only: the process is wired in
``podway.programs.agent.main``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from podway.base.tasks import run_until_signal
from podway.cli.commands.common import read_npl_key, setup_logging
from podway.programs.agent.ports import DEFAULT_RANGE

agent_app = typer.Typer(
    name="agent", help="NodePortLocal agent: a node port per backend pod, kernel DNAT.",
    invoke_without_command=True, no_args_is_help=False)


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app)


@agent_app.callback()
def agent(
    ctx: typer.Context,
    node_name: Annotated[str | None, typer.Option(
        envvar="NODE_NAME", help="The Node this agent serves (its pods only).")] = None,
    port_range: Annotated[str, typer.Option(
        help="Node ports to hand out, inclusive: START-END.")] = DEFAULT_RANGE,
    rules: Annotated[str, typer.Option(help="Kernel backend: nftables or iptables.")] = "nftables",
    kubeconfig: Annotated[str | None, typer.Option(
        help="Kubeconfig file; default: in-cluster config.")] = None,
    node_ip: Annotated[str | None, typer.Option(
        help="nodeIP written in annotations; default: Node InternalIP, else ExternalIP.")] = None,
    resync: Annotated[float, typer.Option(help="Seconds between drift repairs.")] = 30.0,
    metrics_address: Annotated[str, typer.Option(
        help="host:port of /metrics and /healthz (loopback by default: the agent runs with "
             "host networking; give the node's address to be scraped); empty to disable."),
    ] = "127.0.0.1:9464",
    npl_key: Annotated[Path | None, typer.Option(
        help="File with the controller's master key (its --npl-key): this agent signs every "
             "annotation with the key derived from it for its node. Every node then holds the "
             "master: prefer --npl-key-request in a cluster.")] = None,
    npl_key_request: Annotated[bool, typer.Option(
        "--npl-key-request", help="Ask the controller (its --npl-agent) for this node's "
        "signing key through a CertificateSigningRequest; the key stays in memory.")] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    netns: Annotated[str | None, typer.Option(
        help="Act in this network namespace (lab and tests).", hidden=True)] = None,
) -> None:
    """Run the agent (the default when no sub-command is given)."""
    if ctx.invoked_subcommand is not None:
        return
    from podway.base.errors import ConfigError
    from podway.base.netaddr import parse_host_port
    from podway.programs.agent.main import AgentOptions, run
    from podway.programs.agent.ports import PortRange, PortRangeError

    if not node_name:
        raise typer.BadParameter("--node-name (or NODE_NAME) is required", param_hint="--node-name")
    if rules not in ("nftables", "iptables"):
        raise typer.BadParameter("nftables or iptables", param_hint="--rules")
    try:
        parsed = PortRange.parse(port_range)
    except PortRangeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--port-range") from exc
    try:
        metrics = (parse_host_port(metrics_address, default_host="0.0.0.0",
                                   what="--metrics-address") if metrics_address else None)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--metrics-address") from exc
    if npl_key is not None and npl_key_request:
        raise typer.BadParameter("--npl-key and --npl-key-request exclude each other",
                                 param_hint="--npl-key")
    from podway.model.npl import node_key

    key = node_key(read_npl_key(npl_key), node_name) if npl_key is not None else None
    setup_logging(log_level)
    # SIGINT and SIGTERM both end the agent through cancellation (its finally blocks run);
    # kernel rules stay, so traffic keeps flowing across a restart.
    asyncio.run(run_until_signal(run(AgentOptions(
        node_name=node_name, port_range=parsed, rules_kind=rules, kubeconfig=kubeconfig,
        node_ip=node_ip, resync=resync, metrics=metrics, netns=netns, npl_key=key,
        npl_key_request=npl_key_request))))


@agent_app.command()
def cleanup(
    rules: Annotated[str | None, typer.Option(
        help="Only this backend (nftables or iptables); default: both.")] = None,
    netns: Annotated[str | None, typer.Option(help="Act in this network namespace.",
                                              hidden=True)] = None,
) -> None:
    """Remove every kernel rule the agent made (the nftables table, the iptables chain)."""
    from podway.programs.agent.main import cleanup as remove

    kinds = [rules] if rules else ["nftables", "iptables"]
    ok = asyncio.run(remove(kinds=kinds, netns=netns,
                            say=lambda line, error: typer.echo(line, err=error)))
    if not ok:
        raise typer.Exit(1)
