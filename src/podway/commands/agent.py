"""``podway agent``: run the NodePortLocal agent on one node; ``podway agent cleanup`` removes
every kernel rule it made (both backends, whichever exist)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from podway.agent.ports import PortRange

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
        help="Node ports to hand out, inclusive: START-END.")] = "61000-62000",
    rules: Annotated[str, typer.Option(help="Kernel backend: nftables or iptables.")] = "nftables",
    kubeconfig: Annotated[str | None, typer.Option(
        help="Kubeconfig file; default: in-cluster config.")] = None,
    node_ip: Annotated[str | None, typer.Option(
        help="nodeIP written in annotations; default: Node InternalIP, else ExternalIP.")] = None,
    resync: Annotated[float, typer.Option(help="Seconds between drift repairs.")] = 30.0,
    metrics_address: Annotated[str, typer.Option(
        help="host:port of /metrics and /healthz; empty to disable.")] = "0.0.0.0:9464",
    netns: Annotated[str | None, typer.Option(
        help="Act in this network namespace (lab and tests).", hidden=True)] = None,
) -> None:
    """Run the agent (the default when no sub-command is given)."""
    if ctx.invoked_subcommand is not None:
        return
    from podway.agent.ports import PortRange, PortRangeError

    if not node_name:
        raise typer.BadParameter("--node-name (or NODE_NAME) is required", param_hint="--node-name")
    if rules not in ("nftables", "iptables"):
        raise typer.BadParameter("nftables or iptables", param_hint="--rules")
    try:
        parsed = PortRange.parse(port_range)
    except PortRangeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--port-range") from exc
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # SIGINT and SIGTERM both end the agent through cancellation (its finally blocks run);
    # kernel rules stay, so traffic keeps flowing across a restart.
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(_run(node_name=node_name, port_range=parsed, rules_kind=rules,
                         kubeconfig=kubeconfig, node_ip=node_ip, resync=resync,
                         metrics_address=metrics_address, netns=netns))


async def _run(*, node_name: str, port_range: PortRange, rules_kind: str, kubeconfig: str | None,
               node_ip: str | None, resync: float, metrics_address: str,
               netns: str | None) -> None:
    from kubernetes_asyncio import client, config

    from podway.agent.controller import Agent, AgentSettings
    from podway.agent.metrics import Metrics, make_app, serve
    from podway.agent.ports import KernelSocketOpener
    from podway.agent.rules import make_rules

    main = asyncio.current_task()
    if main is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    opener = KernelSocketOpener(netns=netns)
    metrics = Metrics()
    rules = make_rules(rules_kind, netns=netns)
    async with client.ApiClient() as api:
        agent = Agent(api=api, rules=rules, opener=opener,
                      metrics=metrics,
                      settings=AgentSettings(node_name=node_name, port_range=port_range,
                                             node_ip=node_ip, resync_seconds=resync))
        runner = None
        if metrics_address:
            host, _, port = metrics_address.rpartition(":")
            runner = await serve(make_app(metrics, healthy=agent.restored.is_set),
                                 host=host or "0.0.0.0", port=int(port))
        try:
            await agent.run()
        finally:
            if runner is not None:
                await runner.cleanup()
            opener.close()
            rules.close()


@agent_app.command()
def cleanup(
    rules: Annotated[str | None, typer.Option(
        help="Only this backend (nftables or iptables); default: both.")] = None,
    netns: Annotated[str | None, typer.Option(help="Act in this network namespace.",
                                              hidden=True)] = None,
) -> None:
    """Remove every kernel rule the agent made (the nftables table, the iptables chain)."""
    kinds = [rules] if rules else ["nftables", "iptables"]
    asyncio.run(_cleanup(kinds, netns))


async def _cleanup(kinds: list[str], netns: str | None) -> None:
    from podway.agent.rules import RulesError, make_rules

    tools = {"nftables": "nft", "iptables": "iptables-restore"}
    failed = False
    for kind in kinds:
        if shutil.which(tools.get(kind, kind)) is None:
            typer.echo(f"{kind}: not installed, nothing to remove")
            continue
        rules = make_rules(kind, netns=netns)
        try:
            await rules.cleanup()
            typer.echo(f"{kind}: removed")
        except RulesError as exc:
            failed = True
            typer.echo(f"{kind}: {exc}", err=True)
        finally:
            rules.close()
    if failed:
        raise typer.Exit(1)
