"""``collector.paused``: no automatic collection inside, the previous setting restored after."""

from __future__ import annotations

import gc

import pytest

from podway.base import collector


def test_paused_inside_and_enabled_again_after() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_error() -> None:
    with pytest.raises(ValueError, match="boom"), collector.paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
