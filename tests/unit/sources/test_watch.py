"""The live watch through real inotify: any spelling of the folder, a folder that goes and comes
back, a watch that fails, and small edits that never wait behind a big file's parse."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from podway.model import Service
from podway.sources import files as files_module
from podway.sources.base import SourceUpdate
from podway.sources.files import FileSource, SourceError
from podway.sources.manifests import Parsed

SVC = """apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{port: {port}}}]
"""


def _port(update: SourceUpdate, name: str) -> int | None:
    svc = update.snapshot.get(Service, "default", name)
    return None if svc is None else svc.spec.ports[0].port


async def _until(updates: AsyncIterator[SourceUpdate],
                 done: Callable[[SourceUpdate], bool]) -> SourceUpdate:
    while True:
        update = await anext(updates)
        if done(update):
            return update


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    """The test runs with the temporary folder as its working directory."""
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


@pytest.mark.parametrize("spelling", ["relative", "absolute", "symlink", "dotdot"])
async def test_an_edit_applies_whatever_the_folder_spelling(in_tmp: Path, spelling: str) -> None:
    """A relative, absolute, symlinked or ..-containing --manifests path: an edit applies."""
    (in_tmp / "m").mkdir()
    (in_tmp / "other").mkdir()
    (in_tmp / "link").symlink_to("m")
    (in_tmp / "m" / "a.yaml").write_text(SVC.format(name="a", port=80))
    root = {"relative": Path("m"), "absolute": in_tmp / "m", "symlink": Path("link"),
            "dotdot": Path("other/../m")}[spelling]
    updates = FileSource(root).watch()
    try:
        async with asyncio.timeout(10):
            assert _port(await anext(updates), "a") == 80
            (in_tmp / "m" / "a.yaml").write_text(SVC.format(name="a", port=81))
            await _until(updates, lambda u: _port(u, "a") == 81)
    finally:
        await updates.aclose()


async def test_a_deleted_folder_keeps_serving_and_its_re_creation_is_read(tmp_path: Path
                                                                         ) -> None:
    """rm -rf of the folder: last good objects stay, an error says so; re-created: read again."""
    root = tmp_path / "m"
    root.mkdir()
    (root / "a.yaml").write_text(SVC.format(name="a", port=80))
    updates = FileSource(root).watch(missing_poll_s=0.02)
    try:
        async with asyncio.timeout(10):
            await anext(updates)
            shutil.rmtree(root)
            gone = await _until(updates, lambda u: any("gone" in e.message for e in u.errors))
            assert _port(gone, "a") == 80
            assert gone.stale_files == (str(root / "a.yaml"),)
            root.mkdir()
            (root / "b.yaml").write_text(SVC.format(name="b", port=90))
            back = await _until(updates, lambda u: _port(u, "b") == 90)
            assert _port(back, "a") is None  # the new folder has no a.yaml
            assert not back.errors
            (root / "b.yaml").write_text(SVC.format(name="b", port=91))  # watched again
            await _until(updates, lambda u: _port(u, "b") == 91)
    finally:
        await updates.aclose()


async def test_a_folder_swapped_by_rename_is_followed(tmp_path: Path) -> None:
    """mv m m.old; mv m.new m: the new folder's files are read and its later edits apply."""
    root, new = tmp_path / "m", tmp_path / "m.new"
    root.mkdir()
    new.mkdir()
    (root / "a.yaml").write_text(SVC.format(name="a", port=80))
    (new / "a.yaml").write_text(SVC.format(name="a", port=81))
    updates = FileSource(root).watch(missing_poll_s=0.02)
    try:
        async with asyncio.timeout(10):
            await anext(updates)
            root.rename(tmp_path / "m.old")
            new.rename(root)
            await _until(updates, lambda u: _port(u, "a") == 81 and not u.errors)
            (root / "a.yaml").write_text(SVC.format(name="a", port=82))
            await _until(updates, lambda u: _port(u, "a") == 82)
    finally:
        await updates.aclose()


async def test_an_emptied_folder_serves_nothing(tmp_path: Path) -> None:
    """Files removed from a folder that stays: their objects go (that is not a vanished folder)."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="a", port=80))
    updates = FileSource(tmp_path).watch()
    try:
        async with asyncio.timeout(10):
            await anext(updates)
            (tmp_path / "a.yaml").unlink()
            update = await _until(updates, lambda u: _port(u, "a") is None)
            assert (update.errors, update.stale_files) == ((), ())
    finally:
        await updates.aclose()


async def test_a_failed_watch_raises_out_of_watch(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher task failing is a SourceError from ``watch`` at once, not a silent hang."""
    import watchfiles

    async def broken(*_args: object, **_kwargs: object) -> AsyncIterator[set[tuple[int, str]]]:
        raise OSError("inotify watch limit reached")
        yield set()  # pragma: no cover - makes this an async generator

    monkeypatch.setattr(watchfiles, "awatch", broken)
    updates = FileSource(tmp_path).watch()
    try:
        async with asyncio.timeout(10):
            await anext(updates)
            with pytest.raises(SourceError, match="inotify watch limit reached"):
                await anext(updates)
    finally:
        await updates.aclose()


async def test_a_small_edit_is_published_while_a_big_file_is_still_parsing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing is per file off the loop: big.yaml's parse is held, small.yaml's edit still
    arrives; big.yaml's objects follow when its parse ends."""
    real = files_module.read_manifest
    started, release = threading.Event(), threading.Event()

    def held(path: Path, **kwargs: object) -> Parsed:
        if path.name == "big.yaml":
            started.set()
            release.wait(10)
        return real(path, **kwargs)  # type: ignore[arg-type]

    (tmp_path / "small.yaml").write_text(SVC.format(name="small", port=80))
    updates = FileSource(tmp_path).watch()
    seen: asyncio.Queue[SourceUpdate] = asyncio.Queue()

    async def pump() -> None:  # the consumer keeps pulling, as the pipeline does
        async for update in updates:
            seen.put_nowait(update)

    async def until(done: Callable[[SourceUpdate], bool]) -> SourceUpdate:
        while not done(update := await seen.get()):
            pass
        return update

    task = asyncio.create_task(pump())
    try:
        async with asyncio.timeout(10):
            await seen.get()
            monkeypatch.setattr(files_module, "read_manifest", held)
            (tmp_path / "big.yaml").write_text(SVC.format(name="big", port=1))
            assert await asyncio.to_thread(started.wait, 10)  # big.yaml's parse is running
            (tmp_path / "small.yaml").write_text(SVC.format(name="small", port=81))
            update = await until(lambda u: _port(u, "small") == 81)
            assert _port(update, "big") is None  # still being parsed
            release.set()
            await until(lambda u: _port(u, "big") == 1)
    finally:
        release.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_memory_is_given_back_after_a_big_file_goes(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping a file over 1 MiB trims the allocator (off the loop); small files do not."""
    trimmed = threading.Event()
    monkeypatch.setattr(files_module, "_release_memory", trimmed.set)
    (tmp_path / "small.yaml").write_text(SVC.format(name="small", port=80))
    (tmp_path / "big.yaml").write_text(SVC.format(name="big", port=80) + "#" * (1 << 20))
    updates = FileSource(tmp_path).watch()
    try:
        async with asyncio.timeout(10):
            await anext(updates)
            (tmp_path / "small.yaml").unlink()
            await _until(updates, lambda u: _port(u, "small") is None)
            assert not trimmed.is_set()
            (tmp_path / "big.yaml").unlink()
            await _until(updates, lambda u: _port(u, "big") is None)
            assert await asyncio.to_thread(trimmed.wait, 10)
    finally:
        await updates.aclose()
