"""SO_PEERCRED on the xDS unix sockets: a connection from another user is shut down, one from
this user is kept, and a stream from a refused peer is sent nothing (not even a Secret)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import grpc
import pytest

from podway.engines import peers
from podway.engines.peers import accepted_inodes, close_foreign_peers
from podway.envoy.xds.server import XdsServer

from .test_server_local import _cache_with_a_key, _delta_secrets

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
HOLD = ("import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'hi')\n"
        "print('closed' if s.recv(10) == b'' else 'open', flush=True)\n")


@pytest.fixture
def short_dir(short_dir: Path) -> Path:
    """The shared short folder (tests/conftest.py), readable by others as a state folder's
    parent usually is."""
    os.chmod(short_dir, 0o755)
    return short_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as nobody")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no /usr/bin/python3")
def test_a_foreign_peer_is_shut_down_and_our_own_kept(short_dir: Path) -> None:
    """With the socket file opened up (0666), nobody can connect; the credentials check finds
    that connection and shuts it down; our own connection stays up."""
    path = short_dir / "xds.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        os.chmod(path, 0o666)
        listener.listen()
        foreign = subprocess.Popen([SYSTEM_PYTHON, "-c", HOLD, str(path)], user=NOBODY,
                                   group=NOBODY, extra_groups=[], stdout=subprocess.PIPE,
                                   text=True)
        try:
            theirs, _ = listener.accept()
            assert theirs.recv(2) == b"hi"
            with socket.socket(socket.AF_UNIX) as ours:
                ours.connect(str(path))
                mine, _ = listener.accept()
                assert len(accepted_inodes([path])) == 2
                assert close_foreign_peers([path]) == 1
                assert foreign.communicate(timeout=30)[0].strip() == "closed"
                ours.sendall(b"still")
                assert mine.recv(5) == b"still"
                mine.close()
            theirs.close()
        finally:
            if foreign.poll() is None:
                foreign.kill()
                foreign.wait()


async def test_a_refused_peers_stream_gets_nothing(short_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Wiring: when the peer's uid is not allowed, its stream's connection is shut down before
    any response, so the Secret it asks for never arrives."""
    server = XdsServer(_cache_with_a_key(), "")
    await server.start(local=short_dir / "xds.sock")
    try:
        assert server.local_target is not None
        assert await _delta_secrets(server.local_target) == ["tls/default/shop"]
        monkeypatch.setattr(peers, "allowed_uid", lambda uid: False)  # treat us as foreign
        with pytest.raises((grpc.aio.AioRpcError, asyncio.CancelledError)):
            await _delta_secrets(server.local_target)
    finally:
        await server.stop(grace=0)
