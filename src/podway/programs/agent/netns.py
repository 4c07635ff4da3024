"""Joining a named network namespace from one thread (Python 3.11 has no ``os.setns``).

A thread's network namespace is its own, so a dedicated worker thread can join the "node"
namespace of a test or the lab while the rest of the process stays where it is. Sockets and
netlink handles made by that thread stay in that namespace for their whole life.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.thread import BrokenThreadPool

from podway.base.errors import ConfigError

_CLONE_NEWNET = 0x40000000


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (``ip netns`` naming)."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        join_netns(fd, name)
    finally:
        os.close(fd)


def join_netns(fd: int, name: str) -> None:
    """Move the calling thread into the network namespace open as ``fd`` (e.g. one's own,
    kept from ``/proc/thread-self/ns/net`` to go back to); ``name`` is for the error."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({name}): {os.strerror(err)}")


def single_thread(*, netns: str | None, name: str) -> ThreadPoolExecutor:
    """A one-thread executor, inside ``netns`` when given; fails now, with a ``ConfigError``
    naming the namespace, if it cannot join."""
    if netns is None:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    if not os.path.exists(f"/run/netns/{netns}"):
        raise ConfigError(f"--netns {netns}: no such network namespace (see `ip netns list`)")
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-{netns}",
                              initializer=enter_netns, initargs=(netns,))
    try:
        pool.submit(lambda: None).result()
    except BrokenThreadPool:
        pool.shutdown(wait=False)
        raise ConfigError(f"--netns {netns}: cannot join this network namespace "
                          "(root or CAP_SYS_ADMIN needed)") from None
    return pool
