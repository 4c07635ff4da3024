"""Peer credentials on the xDS unix sockets: only this user and root may hold a connection.

The socket files are mode 0600, so the kernel already refuses anyone else at ``connect``. This
is the second check, on the connection itself (``SO_PEERCRED``), so that a socket file opened up
by hand (``chmod``) still serves nobody else. gRPC does not hand its accepted sockets to Python,
so ``close_foreign_peers`` finds them: the connections accepted on a path are listed in
``/proc/self/net/unix`` (they carry the listener's path), matched by inode against this
process's descriptors, asked for their peer's credentials, and a foreign one is shut down (both
directions) before the stream that triggered the check is sent anything.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import grpc

log = logging.getLogger(__name__)

_UCRED = struct.Struct("3i")  # pid, uid, gid
_CONNECTED = "03"  # SS_CONNECTED in /proc/net/unix


class UnixPeers(Protocol):
    """A gRPC server whose unix sockets' peers are checked (``podway.envoy.xds.server.XdsServer``):
    another service on the same server checks its peers against the same paths."""

    @property
    def unix_paths(self) -> list[Path]: ...


def authenticated(context: Any) -> bool:
    """Whether a stream's engine is authenticated: it came over a unix socket (mode 0600:
    same user or root) or presented a client certificate the server verified."""
    if str(context.peer()).startswith("unix"):
        return True
    security = context.auth_context().get("transport_security_type")
    return security == [b"ssl"] and context.peer_identities() is not None


async def admit(context: Any, unix_paths: Iterable[Path], what: str) -> None:
    """The gate of an engine's stream other than xDS (``what``: "the configuration stream",
    "the member health report"): foreign peers of the unix sockets are shut out first, and a
    stream that is not ``authenticated`` is aborted (PERMISSION_DENIED) before it is read."""
    peer = str(context.peer())
    if peer.startswith("unix"):
        close_foreign_peers(list(unix_paths))
    if not authenticated(context):
        log.warning("%s from %s refused: the engine is not authenticated (unix socket or "
                    "client certificate needed)", what, peer)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                            f"{what} needs an authenticated engine")


def allowed_uid(uid: int) -> bool:
    return uid in (0, os.geteuid())


def accepted_inodes(paths: Iterable[Path], table: str = "/proc/self/net/unix") -> set[int]:
    """Inodes of the connected sockets bound to one of ``paths`` (the accepted connections)."""
    wanted = {str(p) for p in paths}
    inodes: set[int] = set()
    try:
        with open(table, encoding="utf-8", errors="replace") as lines:
            next(lines, None)  # header
            for line in lines:
                fields = line.split(maxsplit=7)
                if len(fields) == 8 and fields[5] == _CONNECTED and fields[7].strip() in wanted:
                    inodes.add(int(fields[6]))
    except OSError:
        return set()
    return inodes


def close_foreign_peers(paths: Iterable[Path]) -> int:
    """Shut down every connection accepted on ``paths`` whose peer is neither this user nor
    root; how many were."""
    inodes = accepted_inodes(paths)
    if not inodes:
        return 0
    closed = 0
    for entry in os.scandir("/proc/self/fd"):
        try:
            target = os.readlink(entry.path)
        except OSError:
            continue
        if not target.startswith("socket:[") or int(target[8:-1]) not in inodes:
            continue
        try:
            sock = socket.socket(fileno=os.dup(int(entry.name)))
        except OSError:
            continue
        with sock:  # a duplicate: closing it leaves gRPC's descriptor; shutdown does not
            pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        _UCRED.size))
            if allowed_uid(uid):
                continue
            sock.shutdown(socket.SHUT_RDWR)
            closed += 1
            log.warning("xds: refused a connection from uid=%s pid=%s (only uid %s and root "
                        "may connect)", uid, pid, os.geteuid())
    return closed
