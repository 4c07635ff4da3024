"""The command line Podway starts Envoy with."""

from __future__ import annotations

from pathlib import Path

from podway.envoy.engine.process import Engine, EngineOptions
from podway.envoy.engine.state import open_state


def test_envoy_skips_the_unknown_field_walk_of_every_xds_update(tmp_path: Path) -> None:
    """xDS updates are not walked a second time for unknown-field warnings (a quarter of
    Envoy's time applying a large route table), and nothing else about them is relaxed."""
    engine = Engine(EngineOptions(envoy_path=Path("/bin/envoy"), bootstrap={}))
    with open_state(tmp_path / "state") as state:
        args = engine._args(state)
    assert "--ignore-unknown-dynamic-fields" in args
    assert not {"--reject-unknown-dynamic-fields", "--allow-unknown-static-fields"} & set(args)
