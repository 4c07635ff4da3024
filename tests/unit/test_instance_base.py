"""Every test has an instance base of its own: nothing a test does or finds depends on the
host's default instance folder (another process's live instance there is never seen)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.cli.commands.explain import live_socket
from podway.envoy.engine.state import default_base, instance_dir


def test_the_default_instance_folder_is_this_tests_own(instance_base: str) -> None:
    """``--instance default`` (what ``explain`` without a source asks) resolves inside the
    test's own folder, where nothing runs — whatever runs on the host."""
    assert default_base() == Path(instance_base) / "podway"
    assert instance_dir(None, "default").is_relative_to(instance_base)
    with pytest.raises(ConfigError) as refused:
        live_socket(manifests=None, admin_socket=None, instance="default", state_dir=None)
    assert instance_base in str(refused.value)
    assert "none runs here" in str(refused.value)
    assert os.listdir(instance_base) == []
