"""Fixtures for end-to-end tests: a fresh stack per test, always torn down."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from podway.envoy.engine.adopt import read_identity, terminate_stale
from podway.envoy.engine.state import StateDir
from podway.programs.agent.netns import enter_netns, join_netns

from .harness import Stack
from .local_servers import stack_in


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on delta xDS; ``indirect`` parametrisation with "sotw" switches the protocol."""
    async with stack_in(tmp_path, delta=getattr(request, "param", "delta") == "delta") as made:
        yield made


@pytest.fixture(params=["envoy", "haproxy"])
async def engine_stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on each engine in turn: the same routing tests hold for Envoy and HAProxy."""
    async with stack_in(tmp_path, engine_kind=request.param) as made:
        yield made


@pytest.fixture
def short_dir(short_dir: Path) -> Iterator[Path]:
    """The shared short folder (tests/conftest.py) for state folders; after the test, an Envoy
    a failed test left behind in it is ended (it outlives a killed Podway by design)."""
    try:
        yield short_dir
    finally:
        for folder in short_dir.iterdir():
            record = read_identity(StateDir(folder))
            if record is not None:
                terminate_stale(record)


@pytest.fixture
def migrating_loopback() -> Iterator[str]:
    """The test runs in a network namespace of its own (its loopback only), where
    ``net.ipv4.tcp_migrate_req=1``: a port handed from one process to another with SO_REUSEPORT
    moves the connections still queued on the closing socket to the other one, as on the engine
    nodes ``docs/install.md`` asks for. The host's own setting (often 0: those connections are
    reset) is not the test's to change. Everything the test makes from the main thread after this
    (sockets, child processes) lives there; the namespace is removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a network namespace of the test's own")
    name = f"pw-mig-{os.getpid()}"
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        subprocess.run(["ip", "netns", "add", name], check=True)
        for argv in (["ip", "-n", name, "link", "set", "lo", "up"],
                     ["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.tcp_migrate_req=1"]):
            subprocess.run(argv, check=True)
        enter_netns(name)
        try:  # from here on the thread goes home whatever happens
            assert Path("/proc/sys/net/ipv4/tcp_migrate_req").read_text().strip() == "1"
            yield name
        finally:
            join_netns(home, "home")
    finally:
        os.close(home)
        subprocess.run(["ip", "netns", "del", name], check=False, stderr=subprocess.DEVNULL)
