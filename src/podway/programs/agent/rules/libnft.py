"""libnftables through ctypes: the same payload text as ``nft -f -``, without a process per
change, and with nft's ruleset cache kept warm between changes.

Why: ``nft delete element`` from the command line fetches every element of the map before it
commits (about 15 ms with 1,000 mappings), and each call pays a fork/exec. One long-lived
libnftables context does a single change in well under a millisecond; nft still notices changes
made by others (its cache follows the ruleset generation), so correctness does not depend on it.

The context lives in one dedicated thread, inside ``netns`` when given (tests, the lab).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util

from podway.programs.agent.netns import single_thread
from podway.programs.agent.rules.base import RulesError

_NAMES = ("libnftables.so.1", "libnftables.so")


def _load() -> ctypes.CDLL | None:
    for name in (*_NAMES, ctypes.util.find_library("nftables")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
        lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
        return lib
    return None


def available() -> bool:
    return _load() is not None


class LibNftables:
    def __init__(self, *, netns: str | None = None) -> None:
        lib = _load()
        if lib is None:
            raise RulesError("libnftables is not installed")
        self._lib = lib
        self._pool = single_thread(netns=netns, name="npl-libnft")
        self._ctx: int | None = self._pool.submit(self._new).result()

    def _new(self) -> int:
        ctx = self._lib.nft_ctx_new(0)
        if not ctx:
            raise RulesError("nft_ctx_new failed")
        self._lib.nft_ctx_buffer_output(ctx)
        self._lib.nft_ctx_buffer_error(ctx)
        return int(ctx)

    def _run(self, payload: str) -> None:
        if self._ctx is None:
            raise RulesError("libnftables context is closed")
        rc = self._lib.nft_run_cmd_from_buffer(self._ctx, payload.encode())
        error = self._lib.nft_ctx_get_error_buffer(self._ctx) or b""
        if rc != 0:
            raise RulesError(f"nft: {error.decode(errors='replace').strip()}")

    async def run(self, payload: str) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._run, payload)

    def close(self) -> None:
        def free() -> None:
            if self._ctx is not None:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None

        self._pool.submit(free).result()
        self._pool.shutdown(wait=True)
