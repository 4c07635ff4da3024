"""``podway engine``'s Envoy waits for the controller's first clusters and listeners."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.envoy.engine import bootstrap as bootstrap_module


class _Stop(Exception):
    pass


def test_the_engine_bootstrap_waits_for_the_first_clusters_and_listeners(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Envoy's 15 s default ends its init before a controller's first state at 10,000 routes
    (measured 16-26 s under load), and the scoped listener that arrives after it costs Envoy
    about twice the CPU (docs/performance.md)."""
    from podway.cli.commands.engine import engine

    seen: list[bootstrap_module.BootstrapOptions] = []
    real = bootstrap_module.bootstrap

    def recorded(opts: bootstrap_module.BootstrapOptions) -> dict[str, object]:
        seen.append(opts)
        config = real(opts)
        for key in ("cds_config", "lds_config"):
            assert config["dynamic_resources"][key]["initial_fetch_timeout"] == "0s"
        raise _Stop

    monkeypatch.setattr(bootstrap_module, "bootstrap", recorded)
    with pytest.raises(_Stop):
        engine(xds=["unix:" + str(tmp_path / "x.sock")], node_id="n1",
               state_dir=tmp_path / "state", cert_request=False)
    assert [o.initial_fetch_timeout_s for o in seen] == [0]
