"""Shared test options (``--update-golden`` rewrites golden files instead of comparing), the
garbage collector restored after every test, the one short temporary folder (``short_dir``),
and a private instance base for every test.

The instance base (``podway.envoy.engine.state.default_base``: ``$XDG_RUNTIME_DIR/podway``)
is where ``run`` and ``engine`` put their state folders and where ``explain``, ``status`` and
``config dump`` look for a running instance when given no source. A test must never see the
host's: another process's live ``default`` instance there once answered a unit test's
``explain``. Each test gets a fresh short folder (unix socket paths must stay short)."""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """The collector as it was before each test, whatever the test did (the GC policy
    disables it and freezes the heap while a controller or ``run`` serves)."""
    enabled = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


@pytest.fixture(autouse=True)
def instance_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``$XDG_RUNTIME_DIR`` (the instance base's root) set to a folder of this test's own, for
    the test and every process it starts; removed afterwards."""
    folder = tempfile.mkdtemp(prefix="pw-", dir="/tmp")  # 0700, short: sockets fit sun_path
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh folder with a short path under /tmp (mode 0700), removed after the test: unix
    socket paths must fit 107 bytes, which pytest's ``tmp_path`` often does not leave room for.
    Use ``tmp_path`` where no socket lives."""
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def podway_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Podway's OCI image archive (``./dev image``), built once per test run (tests/image.py)."""
    from tests import image

    reason = image.missing()
    if reason:
        pytest.skip(reason)
    return image.build(tmp_path_factory.getbasetemp() / "image")
