"""SO_REUSEPORT on Envoy listeners: off by default (a second Podway on a host cannot split a
port it serves: it is refused the listener), on with the controller's --listener-reuse-port
(the chart's engines: a new engine pod binds beside the old one on its node, so a rolling
update leaves no moment without a listener). The choice reaches every listener the pipeline
and each engine group's builder make."""

from __future__ import annotations

import pytest

from podway.envoy import types
from podway.envoy.config import Builder, build
from podway.ir import IR, L4Route, Listener, ListenerProtocol, WeightedPool
from podway.model.base import ObjectRef

REF = ObjectRef(kind="Service", namespace="default", name="web")


def _ir() -> IR:
    tcp = Listener(name="tcp", address="198.18.0.1", port=80, protocol=ListenerProtocol.TCP,
                   l4_routes=(L4Route(name="r", origin=REF,
                                      backends=(WeightedPool(pool="p", weight=1),)),))
    return IR(listeners=(tcp,), pools={})


@pytest.mark.parametrize("reuse", [False, True])
def test_listeners_share_their_port_only_when_asked(reuse: bool) -> None:
    for resources in (build(_ir(), reuse_port=reuse),
                      Builder(reuse_port=reuse).build(_ir())):
        listener = resources[types.LISTENER]["tcp"].message
        assert listener.HasField("enable_reuse_port")  # explicit: never Envoy's default
        assert listener.enable_reuse_port.value is reuse


def test_the_controller_flag_reaches_the_pipeline_and_the_groups() -> None:
    import typer

    from podway.cli.commands.controller import controller
    from podway.pipeline import Pipeline
    from podway.programs.controller.groups import EngineGroups
    from podway.translate import TranslateOptions

    alone = typer.Typer()
    alone.command()(controller)
    command = typer.main.get_command(alone)
    assert command.make_context("controller", ["--listener-reuse-port"]).params[
        "listener_reuse_port"] is True
    assert command.make_context("controller", []).params["listener_reuse_port"] is False
    for reuse in (False, True):
        pipeline = Pipeline(None, translate=TranslateOptions(), reuse_port=reuse)  # type: ignore[arg-type]
        assert pipeline._builder.reuse_port is reuse
        groups = EngineGroups(pipeline)
        groups.cache_for("edge")
        assert groups._caches["edge"][1].reuse_port is reuse
