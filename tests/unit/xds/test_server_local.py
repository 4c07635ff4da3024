"""The co-located engine's private unix socket: it fits sun_path, and it never leaks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from podway.xds.cache import Cache
from podway.xds.server import XdsServer


async def test_long_tmpdir_still_gives_a_bindable_socket(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With a TMPDIR too long for a unix socket path, the socket goes under /tmp instead."""
    long_dir = tmp_path / ("x" * 90)
    long_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    server = XdsServer(Cache(), "127.0.0.1:0", local=True)
    await server.start()
    try:
        assert server.local_target is not None
        path = server.local_target.removeprefix("unix:")
        assert len(path) <= 100
        assert os.path.exists(path)
    finally:
        await server.stop(grace=0)
    assert not os.path.exists(os.path.dirname(path))


async def test_failed_start_removes_the_private_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the server cannot start, the private socket folder is removed with it."""
    before = set(Path(tempfile.gettempdir()).glob("podway-xds-*"))
    server = XdsServer(Cache(), "127.0.0.1:0", local=True)

    async def broken_start(self: object) -> None:
        raise RuntimeError("cannot start")

    monkeypatch.setattr("grpc.aio._server.Server.start", broken_start)
    with pytest.raises(RuntimeError):
        await server.start()
    assert set(Path(tempfile.gettempdir()).glob("podway-xds-*")) == before
