"""The ``Rules`` seam and the shared shell of the kernel backends.

A backend remembers the rule set it was asked to install (``desired``) and changes the kernel
rules in batches: one write per full sync and one per incremental change, never one per rule.
(The UDP conntrack clean-up after a removal is the exception: one ``conntrack -D`` per removed
or re-pointed UDP rule, fine for ordinary churn, slow for mass removals.)
Payload text comes from pure functions in each backend module so tests assert it exactly.

If an incremental change fails (someone edited the kernel under us), the backend falls back to
a full, atomic sync of ``desired``. If that fails too, the change is dropped from ``desired``
and the kernel is marked unknown, so the retry writes everything instead of finding nothing to
do. ``repair`` takes the rule set from the caller's source of truth (the controller's port
table), reads the kernel back and re-syncs on any difference; the controller calls it
periodically. After a rule is removed or re-pointed, its stale UDP conntrack entries are
deleted (``conntrack.py``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from podway.base.children import run_command
from podway.base.errors import PodwayError
from podway.programs.agent.rules.conntrack import Conntrack
from podway.programs.agent.types import L4, Rule


class RulesError(PodwayError):
    """A kernel rule command failed."""


class CommandMissing(RulesError):
    """A tool the backend needs is not installed (say ``nft`` next to libnftables)."""


class RulesDenied(RulesError):
    """The kernel refused to show or change its rules: no root (CAP_NET_ADMIN). Never read as
    "nothing installed": the rules may well be there."""


#: What nft and iptables say when the caller may not read the ruleset.
_DENIED = ("Operation not permitted", "Permission denied", "you must be root")


def refused(error: RulesError, what: str) -> RulesError:
    """``error`` as ``RulesDenied`` when the kernel refused for lack of privilege, else as is."""
    if isinstance(error, RulesDenied) or not any(m in str(error) for m in _DENIED):
        return error
    return RulesDenied(f"cannot read {what}: permission denied (run as root, or with "
                       "CAP_NET_ADMIN)")


class Rules(Protocol):
    """What the controller needs from a kernel backend."""

    name: str

    async def sync(self, rules: Iterable[Rule]) -> None:
        """Make the kernel hold exactly ``rules`` (atomic where the backend allows)."""

    async def apply(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        """Incremental change; ``remove`` is applied before ``add``."""

    async def repair(self, want: Callable[[], Iterable[Rule]]) -> bool:
        """Make the kernel hold exactly ``want()`` (called under the backend's lock, so it sees
        the caller's state after any change in flight); True if anything had to be rewritten."""

    async def cleanup(self) -> bool:
        """Remove everything this backend ever installed; False if there was nothing."""

    async def installed(self) -> set[Rule] | None:
        """The rules in the kernel now, or None when the hooks into them are incomplete."""

    def close(self) -> None:
        """Release process resources (threads, library handles); kernel rules stay."""


class CommandRunner:
    """Runs a command (optionally inside network namespace ``netns``) with ``stdin``."""

    def __init__(self, *, netns: str | None = None) -> None:
        self.netns = netns

    def argv(self, *args: str) -> list[str]:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*prefix, *args]

    async def run(self, *args: str, stdin: str = "") -> str:
        """``args``' output; every failure, a missing tool included, is a ``RulesError`` (callers
        handle that one type; a stray ``FileNotFoundError`` would crash the agent's loops)."""
        # Checked here too because under ``ip netns exec`` a missing tool is just exit 255.
        if shutil.which(args[0]) is None:
            raise CommandMissing(f"{args[0]} is not installed (not found on PATH)")
        argv = self.argv(*args)
        try:
            code, out, err = await run_command(*argv, stdin=stdin.encode())
        except FileNotFoundError as exc:
            raise CommandMissing(f"{argv[0]} is not installed: {exc}") from exc
        except OSError as exc:
            raise RulesError(f"{' '.join(argv)} could not start: {exc}") from exc
        if code != 0:
            raise RulesError(f"{' '.join(argv)} exited {code}: "
                             f"{err.decode(errors='replace').strip()}")
        return out.decode()


class KernelRules:
    """Common state for the kernel backends; subclasses do the payload I/O."""

    name = "kernel"

    def __init__(self, *, runner: CommandRunner, conntrack: Conntrack | None = None) -> None:
        self.runner = runner
        self.conntrack = conntrack or Conntrack(runner=runner)
        self.desired: dict[tuple[L4, int], Rule] = {}
        # After a failed write nobody knows what the kernel holds: the next change (or repair)
        # must write everything, not a delta computed against a state that may not exist.
        self.kernel_unknown = False
        self._lock = asyncio.Lock()

    async def sync(self, rules: Iterable[Rule]) -> None:
        async with self._lock:
            before = set(self.desired.values())
            self.desired = {rule.key: rule for rule in rules}
            await self._full_sync_locked()
            gone = before - set(self.desired.values())
        await self.conntrack.forget(gone)

    async def apply(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        async with self._lock:
            previous = dict(self.desired)
            remove = [r for r in remove if self.desired.get(r.key) == r]
            for rule in remove:
                del self.desired[rule.key]
            add = [r for r in add if self.desired.get(r.key) != r]  # already there: no-op
            # Replacing a key: the old rule goes first, in the same batch.
            remove += [self.desired[r.key] for r in add if r.key in self.desired]
            for rule in add:
                self.desired[rule.key] = rule
            if not add and not remove and not self.kernel_unknown:
                return
            try:
                if self.kernel_unknown:
                    await self._full_sync_locked()
                else:
                    try:
                        await self._apply_locked(add=add, remove=remove)
                    except RulesError:
                        await self._full_sync_locked()
            except BaseException:
                # Nothing of this change is known to be in the kernel: forget it, so a retry of
                # the same change is not mistaken for a no-op.
                self.desired = previous
                raise
        # Removed and replaced rules: their UDP flows must not stick to the old pod.
        await self.conntrack.forget(remove)

    async def repair(self, want: Callable[[], Iterable[Rule]]) -> bool:
        async with self._lock:
            before = set(self.desired.values())
            self.desired = {rule.key: rule for rule in want()}
            if await self._in_kernel() == set(self.desired.values()):
                self.kernel_unknown = False
                return False
            await self._full_sync_locked()
            gone = before - set(self.desired.values())
        await self.conntrack.forget(gone)
        return True

    async def _full_sync_locked(self) -> None:
        try:
            await self._sync_locked()
        except BaseException:
            self.kernel_unknown = True
            raise
        self.kernel_unknown = False

    async def cleanup(self) -> bool:
        async with self._lock:
            self.desired = {}
            return await self._cleanup_locked()

    def close(self) -> None:
        """Nothing to release by default."""

    async def installed(self) -> set[Rule] | None:
        """The rules in the kernel now, or None when the hooks into them are incomplete."""
        async with self._lock:
            return await self._read()

    async def _in_kernel(self) -> set[Rule] | None:
        return await self._read()

    # Subclasses implement these four.
    async def _sync_locked(self) -> None:
        raise NotImplementedError

    async def _apply_locked(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        raise NotImplementedError

    async def _cleanup_locked(self) -> bool:
        raise NotImplementedError

    async def _read(self) -> set[Rule] | None:
        raise NotImplementedError
