"""The VIP test bed's own promise: ``close`` removes what it made even when a step before the
namespaces fails with what ``suppress(Exception)`` does not catch (a test's timeout raises a
``BaseException``), so no ``pwvip`` namespace outlives a failed run. No root needed: the bed's
work directory goes with its namespaces and is what is checked."""

from __future__ import annotations

import pytest

from tests.integration.vip.bed import Bed


class _Timeout(BaseException):
    """Stands in for pytest-timeout's or a cancellation's exception."""


async def test_close_deletes_the_namespaces_when_reaping_is_interrupted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bed = Bed("vrrp")
    deleted: list[list[str]] = []
    monkeypatch.setattr(bed, "_delete_namespaces", lambda: deleted.append(list(bed._made)))
    bed._made.append("pwvip-never-made")

    def interrupted() -> None:
        raise _Timeout

    monkeypatch.setattr(bed, "_reap", interrupted)
    with pytest.raises(_Timeout):
        await bed.close()
    assert deleted == [["pwvip-never-made"]]
    bed.dir.rmdir()
