"""Our own writes read back: the watch event of a version we wrote is not parsed
(``KubeSource.expect_echo``), unless a list brings it (changes under it may be unseen)."""

from __future__ import annotations

from typing import Any

import pytest

from podway.kube.emulator import KubeEmulator
from podway.model.loader import parse_object
from podway.sources import kube as kube_source
from tests.unit.sources.test_kube_source import running, service, until_update
from tests.waiting import eventually

KEY = ("shop", "web")


@pytest.fixture
async def emu() -> Any:
    async with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the objects the source parses, in order."""
    names: list[str] = []

    def counting(raw: dict[str, Any], **kwargs: Any) -> Any:
        names.append(str(raw["metadata"]["name"]))
        return parse_object(raw, **kwargs)
    monkeypatch.setattr(kube_source, "parse_object", counting)
    return names


def with_status(ip: str, port: int = 80) -> dict[str, Any]:
    raw = service(port=port)
    raw["status"] = {"loadBalancer": {"ingress": [{"ip": ip}]}}
    return raw


async def delivered(source: kube_source.KubeSource, version: str) -> None:
    """Until the Service informer saw ``version`` of the Service."""
    await eventually(lambda: source._informers["Service"]._known.get(KEY) == version,
                     within=10)


async def test_the_event_of_our_own_write_is_not_parsed(emu: KubeEmulator,
                                                        parsed: list[str]) -> None:
    """Only the echo of the very version written is skipped; one of another version (someone
    else's write) is parsed, and later changes still arrive."""
    emu.put("services", service())
    async with running(emu) as (source, next_update):
        await next_update()
        before = len(parsed)
        ours = emu.put("services", with_status("198.18.0.1"))["metadata"]["resourceVersion"]
        source.expect_echo("Service", KEY, ours)  # before any event can arrive
        await delivered(source, ours)
        assert len(parsed) == before  # our own write: not parsed
        assert source.echoes == 1
        other = emu.put("services", with_status("198.18.0.2"))["metadata"]["resourceVersion"]
        source.expect_echo("Service", KEY, str(int(other) + 1000))  # not this version
        await delivered(source, other)
        assert len(parsed) == before + 1
        emu.put("services", service(port=81))
        update = await next_update()
        assert update.changed == (("Service", KEY),)
        assert update.snapshot.objects["Service"][KEY].spec.ports[0].port == 81
        # An expectation never met (its echo came first) goes with the object's next event,
        # a deletion too: nothing is held for objects that are gone.
        source.expect_echo("Service", KEY, "1")
        emu.delete("services", "shop", "web")
        await until_update(next_update, lambda u: KEY not in u.snapshot.objects["Service"])
        assert len(source._echoes) == 0


async def test_a_list_that_brings_our_version_is_parsed(emu: KubeEmulator,
                                                        parsed: list[str]) -> None:
    """A spec change the watch missed, under our status write: the re-list reports only our
    version, and that must be parsed, or the spec change would be lost."""
    emu.put("services", service())
    async with running(emu) as (source, next_update):
        await next_update()
        emu.break_watches("services")
        emu.fail(410, method="GET", plural="services")  # the re-watch: history gone, re-list
        emu.put("services", service(port=81))  # no watch hears of these two
        ours = emu.put("services", with_status("198.18.0.1", port=81))
        source.expect_echo("Service", KEY, ours["metadata"]["resourceVersion"])
        update = await until_update(
            next_update, lambda u: u.snapshot.objects["Service"][KEY].spec.ports[0].port == 81)
    assert update.changed == (("Service", KEY),)
    assert source.relists >= 1
