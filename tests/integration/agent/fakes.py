"""Test doubles for the agent's seams: an in-memory rules backend and a socket opener."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable, Iterable, Sequence

from podway.programs.agent.types import L4, Rule


class FakeRules:
    """In-memory ``Rules``: ``kernel`` is what a real backend would have installed."""

    name = "fake"

    def __init__(self) -> None:
        self.kernel: dict[tuple[L4, int], Rule] = {}
        self.syncs: list[set[Rule]] = []
        self.applies: list[tuple[list[Rule], list[Rule]]] = []
        self.repairs = 0

    async def sync(self, rules: Iterable[Rule]) -> None:
        self.kernel = {r.key: r for r in rules}
        self.syncs.append(set(self.kernel.values()))

    async def apply(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        self.applies.append((list(add), list(remove)))
        for rule in remove:
            if self.kernel.get(rule.key) == rule:
                del self.kernel[rule.key]
        for rule in add:
            self.kernel[rule.key] = rule

    async def repair(self, want: Callable[[], Iterable[Rule]]) -> bool:
        wanted = {r.key: r for r in want()}
        if wanted == self.kernel:
            return False
        self.kernel = wanted
        self.repairs += 1
        return True

    async def cleanup(self) -> bool:
        had, self.kernel = bool(self.kernel), {}
        return had

    async def installed(self) -> set[Rule] | None:
        return set(self.kernel.values())

    def close(self) -> None:
        """Nothing to release."""

    @property
    def rules(self) -> set[Rule]:
        return set(self.kernel.values())


class FakeHeld:
    def __init__(self, opener: FakeOpener, key: tuple[L4, int]) -> None:
        self.opener, self.key = opener, key

    def close(self) -> None:
        self.opener.held.discard(self.key)


class FakeOpener:
    """Socket opener over a set: ``busy`` ports are held by some other process; ``fail_next``
    makes the next open of a protocol raise that errno (say EMFILE) once."""

    def __init__(self, busy: Iterable[tuple[L4, int]] = ()) -> None:
        self.busy = set(busy)
        self.held: set[tuple[L4, int]] = set()
        self.fail_next: dict[L4, int] = {}

    def open(self, *, port: int, protocol: L4) -> FakeHeld:
        if protocol in self.fail_next:
            code = self.fail_next.pop(protocol)
            raise OSError(code, os.strerror(code))
        key = (protocol, port)
        if key in self.busy or key in self.held:
            raise OSError(errno.EADDRINUSE, "in use")
        self.held.add(key)
        return FakeHeld(self, key)


class SlowRules(FakeRules):
    """A backend whose kernel writes take time, as a real nft/iptables-restore call does: the
    change lands only after the write, so a drift check in between sees the kernel as it is."""

    def __init__(self, write_s: float = 0.002) -> None:
        super().__init__()
        self.write_s = write_s

    async def apply(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        await asyncio.sleep(self.write_s)
        await super().apply(add=add, remove=remove)
