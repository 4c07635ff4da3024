"""The agent process: client, kernel backend, socket opener, metrics server and the agent,
wired together and torn down in order. ``podway agent`` parses flags and calls ``run``.

Invariants: nothing touches the kernel before the API client is known to work (a bad
kubeconfig or no cluster is one ``KubeConfigError``/``KubeUnreachable`` line, not a
traceback); kernel rules outlive the process (traffic keeps flowing across a restart), while
sockets, threads and the metrics server close in ``finally`` blocks that survive cancellation.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from podway.base.netaddr import HostPort
from podway.programs.agent.ports import PortRange

log = logging.getLogger("podway.programs.agent")

TOOLS = {"nftables": "nft", "iptables": "iptables-restore"}


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    node_name: str  # the Node this agent serves (its pods only)
    port_range: PortRange  # node ports handed out, inclusive
    rules_kind: str  # "nftables" or "iptables"
    kubeconfig: str | None = None  # None: in-cluster service account
    node_ip: str | None = None  # annotation nodeIP override
    resync: float = 30.0  # seconds between drift repairs
    metrics: HostPort | None = None  # /metrics and /healthz; None: not served
    netns: str | None = None  # act inside this network namespace (lab, tests)
    npl_key: bytes | None = field(default=None, repr=False)  # this node's signing key
    npl_key_request: bool = False  # ask the controller for this node's key (--npl-key-request)


async def run(options: AgentOptions) -> None:
    """Run the agent until cancelled."""
    from podway.kube.client import check_reachable, connect
    from podway.programs.agent.controller import Agent, AgentSettings
    from podway.programs.agent.metrics import Metrics
    from podway.programs.agent.ports import KernelSocketOpener
    from podway.programs.agent.rules import make_rules
    from podway.readers.metrics.exposition import make_app, serve

    api = await connect(kubeconfig=options.kubeconfig)
    async with api:
        await check_reachable(api)
        key = options.npl_key
        if options.npl_key_request:
            from podway.programs.agent.keyrequest import request_node_key

            key = await request_node_key(api, options.node_name)  # before any kernel rule
        opener = KernelSocketOpener(netns=options.netns)
        rules = make_rules(options.rules_kind, netns=options.netns)
        metrics = Metrics()
        try:
            agent = Agent(api=api, rules=rules, opener=opener, metrics=metrics,
                          settings=AgentSettings(node_name=options.node_name,
                                                 port_range=options.port_range,
                                                 node_ip=options.node_ip,
                                                 resync_seconds=options.resync,
                                                 npl_key=key))
            runner = None
            if options.metrics is not None:
                runner = await serve(make_app(registries=(metrics.registry,),
                                              healthy=agent.restored.is_set),
                                     host=options.metrics.host, port=options.metrics.port)
            try:
                await agent.run()
            finally:
                if runner is not None:
                    await runner.cleanup()
        finally:
            opener.close()
            rules.close()


async def cleanup(*, kinds: list[str], netns: str | None,
                  say: Callable[[str, bool], None]) -> bool:
    """Remove the agent's kernel rules of each backend; ``say(line, is_error)`` reports each
    backend truthfully (removed / nothing installed / not installed / the failure, a refusal
    to show the rules included: without root nobody can tell whether they are there).
    True when every backend succeeded."""
    from podway.programs.agent.rules import RulesError, make_rules

    ok = True
    for kind in kinds:
        if shutil.which(TOOLS.get(kind, kind)) is None:
            say(f"{kind}: not installed, nothing to remove", False)
            continue
        rules = make_rules(kind, netns=netns)
        try:
            removed = await rules.cleanup()
            say(f"{kind}: removed" if removed else f"{kind}: nothing installed", False)
        except RulesError as exc:
            ok = False
            say(f"{kind}: {exc}", True)
        finally:
            rules.close()
    return ok
