"""The folder source: last good objects per file, identity of unchanged objects, duplicates."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from podway.model import Service
from podway.model.loader import LoadLimits
from podway.sources.files import FileSource, load_paths, wait_stable
from podway.sources.manifests import ManifestSet, read_manifest

SVC = """apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{port: {port}}}]
"""


def test_broken_file_keeps_its_last_good_objects(tmp_path: Path) -> None:
    """A file that stops parsing keeps serving its previous objects and reports the error."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="a", port=80))
    source = FileSource(tmp_path)
    first = source.load()
    assert first.snapshot.get(Service, "default", "a") is not None
    (tmp_path / "a.yaml").write_text("kind: [unclosed")
    second = source.apply({tmp_path / "a.yaml"})
    assert second.snapshot.get(Service, "default", "a") is not None
    assert second.errors
    assert second.stale_files == (str(tmp_path / "a.yaml"),)
    (tmp_path / "a.yaml").write_text(SVC.format(name="a", port=81))
    third = source.apply({tmp_path / "a.yaml"})
    svc = third.snapshot.get(Service, "default", "a")
    assert svc is not None
    assert svc.spec.ports[0].port == 81
    assert (third.errors, third.stale_files) == ((), ())


def test_unchanged_objects_keep_identity_across_reloads(tmp_path: Path) -> None:
    """Rewriting a file with one object changed keeps the other object's identity."""
    path = tmp_path / "two.yaml"
    path.write_text(SVC.format(name="a", port=80) + "---\n" + SVC.format(name="b", port=80))
    source = FileSource(tmp_path)
    first = source.load()
    path.write_text(SVC.format(name="a", port=80) + "---\n" + SVC.format(name="b", port=90))
    second = source.apply({path})
    assert second.snapshot.get(Service, "default", "a") is first.snapshot.get(
        Service, "default", "a")
    assert second.snapshot.get(Service, "default", "b") is not first.snapshot.get(
        Service, "default", "b")


def test_deleted_file_removes_its_objects_and_duplicates_are_reported(tmp_path: Path) -> None:
    """The first file in path order wins a duplicate; deleting a file drops its objects."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="x", port=80))
    (tmp_path / "b.yaml").write_text(SVC.format(name="x", port=90))
    source = FileSource(tmp_path)
    update = source.load()
    svc = update.snapshot.get(Service, "default", "x")
    assert svc is not None
    assert svc.spec.ports[0].port == 80
    assert any("duplicate" in e.message for e in update.errors)
    (tmp_path / "a.yaml").unlink()
    (tmp_path / "b.yaml").unlink()
    assert source.apply({tmp_path / "a.yaml", tmp_path / "b.yaml"}).snapshot.get(
        Service, "default", "x") is None


def test_incremental_updates_equal_a_fresh_load_and_name_what_changed(tmp_path: Path) -> None:
    """After any sequence of edits the patched snapshot equals a full reload; ``changed``
    lists exactly the objects whose winner changed."""
    source = FileSource(tmp_path)
    source.load()
    steps = [
        {"a.yaml": SVC.format(name="x", port=80)},
        {"b.yaml": SVC.format(name="x", port=81) + "---\n" + SVC.format(name="y", port=1)},
        {"a.yaml": None},  # b's x now wins
        {"b.yaml": SVC.format(name="y", port=2)},  # x gone, y changed
    ]
    expected_changes = [{("Service", ("default", "x"))},
                        {("Service", ("default", "y"))},
                        {("Service", ("default", "x"))},
                        {("Service", ("default", "x")), ("Service", ("default", "y"))}]
    for step, expected in zip(steps, expected_changes, strict=True):
        for name, text in step.items():
            if text is None:
                (tmp_path / name).unlink()
            else:
                (tmp_path / name).write_text(text)
        update = source.apply({tmp_path / n for n in step})
        fresh = FileSource(tmp_path).load().snapshot
        assert {o.ref: o for o in update.snapshot.all()} == {o.ref: o for o in fresh.all()}
        assert set(update.changed or ()) == expected


def test_a_merge_that_reports_nothing_leaves_the_same_state(tmp_path: Path) -> None:
    """A first load says "everything changed" (``changed`` None) without sorting every key
    for nobody; the state it leaves is the reporting merge's, and later merges report."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="x", port=80))
    (tmp_path / "b.yaml").write_text(SVC.format(name="x", port=81) + "---\n"
                                     + SVC.format(name="y", port=1))
    reads = {p: read_manifest(p) for p in sorted(tmp_path.iterdir())}
    quiet, reporting = ManifestSet(), ManifestSet()
    assert quiet.merge(reads, report=False) == ()
    assert reporting.merge(reads) == (("Service", ("default", "x")),
                                      ("Service", ("default", "y")))
    assert quiet.snapshot.objects == reporting.snapshot.objects
    assert quiet.errors() == reporting.errors()  # the duplicate x, on b.yaml
    assert FileSource(tmp_path).load().changed is None
    (tmp_path / "a.yaml").unlink()
    assert quiet.merge({tmp_path / "a.yaml": None}) == (("Service", ("default", "x")),)


def _names(update_paths: set[Path], root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in update_paths}


def test_a_folder_moved_in_or_out_is_loaded_or_dropped(tmp_path: Path) -> None:
    """One event on a folder (a move) reloads the manifests that appeared or vanished under it."""
    root, elsewhere = tmp_path / "m", tmp_path / "elsewhere"
    root.mkdir()
    (elsewhere / "team").mkdir(parents=True)
    (elsewhere / "team" / "a.yaml").write_text(SVC.format(name="a", port=80))
    source = FileSource(root)
    source.load()
    (elsewhere / "team").rename(root / "team")
    reload = source.to_reload({root / "team"})
    assert _names(reload, root) == {"team/a.yaml"}
    assert source.apply(reload).snapshot.get(Service, "default", "a") is not None
    (root / "team").rename(elsewhere / "team")
    reload = source.to_reload({root / "team"})
    assert _names(reload, root) == {"team/a.yaml"}
    assert source.apply(reload).snapshot.get(Service, "default", "a") is None


def _configmap_version(root: Path, version: str, port: int) -> None:
    """What the kubelet does: a new ..<version> folder, then ..data swapped to it atomically."""
    folder = root / f"..{version}"
    folder.mkdir()
    (folder / "svc.yaml").write_text(SVC.format(name="a", port=port))
    (root / "..data_tmp").symlink_to(folder.name)
    (root / "..data_tmp").replace(root / "..data")
    if not (root / "svc.yaml").is_symlink():
        (root / "svc.yaml").symlink_to("..data/svc.yaml")


def test_a_configmap_data_swap_reloads_files_behind_unchanged_links(tmp_path: Path) -> None:
    """Events only on ..-paths (a ConfigMap update) still reload the visible manifests."""
    _configmap_version(tmp_path, "v1", 80)
    source = FileSource(tmp_path)
    svc = source.load().snapshot.get(Service, "default", "a")
    assert svc is not None
    assert svc.spec.ports[0].port == 80
    _configmap_version(tmp_path, "v2", 81)
    reload = source.to_reload({tmp_path / "..data", tmp_path / "..data_tmp",
                               tmp_path / "..v2", tmp_path / "..v2" / "svc.yaml"})
    assert _names(reload, tmp_path) == {"svc.yaml"}
    svc = source.apply(reload).snapshot.get(Service, "default", "a")
    assert svc is not None
    assert svc.spec.ports[0].port == 81


async def test_watch_follows_a_configmap_swap_and_a_folder_move(tmp_path: Path) -> None:
    """Through real inotify: a ..data swap and a folder moved in both reach the snapshot."""
    root, elsewhere = tmp_path / "m", tmp_path / "elsewhere"
    root.mkdir()
    _configmap_version(root, "v1", 80)
    (elsewhere / "team").mkdir(parents=True)
    (elsewhere / "team" / "b.yaml").write_text(SVC.format(name="b", port=90))
    updates = FileSource(root).watch()
    try:
        async with asyncio.timeout(10):
            first = await anext(updates)
            assert first.snapshot.get(Service, "default", "b") is None
            _configmap_version(root, "v2", 81)
            while True:
                svc = (await anext(updates)).snapshot.get(Service, "default", "a")
                if svc is not None and svc.spec.ports[0].port == 81:
                    break
            (elsewhere / "team").rename(root / "team")
            while (await anext(updates)).snapshot.get(Service, "default", "b") is None:
                pass
    finally:
        await updates.aclose()


def test_a_folder_under_a_dot_folder_is_loaded(tmp_path: Path) -> None:
    """Only dot paths inside the folder are skipped, not dots in the folder's own path."""
    root = tmp_path / ".config" / "podway"
    (root / ".hidden").mkdir(parents=True)
    (root / "a.yaml").write_text(SVC.format(name="a", port=80))
    (root / ".hidden" / "b.yaml").write_text(SVC.format(name="b", port=80))
    snapshot = FileSource(root).load().snapshot
    assert snapshot.get(Service, "default", "a") is not None
    assert snapshot.get(Service, "default", "b") is None


async def test_wait_stable_returns_once_a_file_stops_growing(tmp_path: Path) -> None:
    """A file being appended to is waited for; its full size is there when the wait ends."""
    path = tmp_path / "a.yaml"
    path.write_text("")

    async def writer() -> None:
        for _ in range(20):
            with path.open("a") as out:
                out.write("x" * 100)
            await asyncio.sleep(0.001)

    task = asyncio.create_task(writer())
    await asyncio.sleep(0)
    assert await wait_stable({path}, limit_s=2)
    assert path.stat().st_size == 2000
    await task


async def test_wait_stable_gives_up_on_a_file_that_never_settles(tmp_path: Path) -> None:
    """A file that keeps changing is read anyway once the limit is reached."""
    path = tmp_path / "a.yaml"
    stop = asyncio.Event()

    async def writer() -> None:
        while not stop.is_set():
            with path.open("a") as out:
                out.write("x")
            await asyncio.sleep(0.0005)

    task = asyncio.create_task(writer())
    try:
        assert not await wait_stable({path}, limit_s=0.05)
    finally:
        stop.set()
        await task


def test_a_new_file_that_sorts_earlier_does_not_take_over_a_live_object(tmp_path: Path) -> None:
    """The object there first keeps serving; the later file's copy is an error on that file."""
    (tmp_path / "b.yaml").write_text(SVC.format(name="x", port=80))
    source = FileSource(tmp_path)
    source.load()
    (tmp_path / "a.yaml").write_text(SVC.format(name="x", port=90))
    update = source.apply({tmp_path / "a.yaml"})
    assert update.snapshot.get(Service, "default", "x").spec.ports[0].port == 80  # type: ignore[union-attr]
    assert update.changed == ()
    [error] = update.errors
    assert (error.file, error.document) == (str(tmp_path / "a.yaml"), 0)
    assert "b.yaml" in error.message
    (tmp_path / "b.yaml").write_text(SVC.format(name="x", port=81))  # the owner's edits apply
    update = source.apply({tmp_path / "b.yaml"})
    assert update.snapshot.get(Service, "default", "x").spec.ports[0].port == 81  # type: ignore[union-attr]
    (tmp_path / "b.yaml").unlink()  # the owner goes: the next in line takes over
    update = source.apply({tmp_path / "b.yaml"})
    assert update.snapshot.get(Service, "default", "x").spec.ports[0].port == 90  # type: ignore[union-attr]
    assert update.errors == ()


def test_limits_name_the_file_and_keep_its_last_good_objects(tmp_path: Path) -> None:
    """A file grown past max_file_bytes, or objects past max_objects_total, is refused whole:
    an error on that file, its last good objects (if any) keep serving."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="a", port=80))
    (tmp_path / "b.yaml").write_text(SVC.format(name="b", port=80))
    source = FileSource(tmp_path, limits=LoadLimits(max_file_bytes=200, max_objects_total=2))
    assert not source.load().errors
    (tmp_path / "a.yaml").write_text(SVC.format(name="a", port=81) + "#" * 300)
    update = source.apply({tmp_path / "a.yaml"})
    [error] = update.errors
    assert error.file == str(tmp_path / "a.yaml")
    assert "200 bytes" in error.message
    assert update.snapshot.get(Service, "default", "a").spec.ports[0].port == 80  # type: ignore[union-attr]
    (tmp_path / "c.yaml").write_text(SVC.format(name="c", port=80))
    update = source.apply({tmp_path / "c.yaml"})
    [_, error] = update.errors
    assert error.file == str(tmp_path / "c.yaml")
    assert "limit of 2 objects in total" in error.message
    assert update.snapshot.get(Service, "default", "c") is None


def test_kinds_not_read_are_warnings_of_the_update(tmp_path: Path) -> None:
    """A Deployment next to the Services is reported as a warning, not silently skipped."""
    (tmp_path / "a.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    update = FileSource(tmp_path).load()
    [warning] = update.warnings
    assert warning.file == str(tmp_path / "a.yaml")
    assert update.errors == ()


def test_validate_and_run_load_the_same_objects(tmp_path: Path) -> None:
    """load_paths (validate, demo) and the file source agree on objects and errors."""
    (tmp_path / "a.yaml").write_text(SVC.format(name="x", port=80))
    (tmp_path / "b.yaml").write_text(SVC.format(name="x", port=90) + "---\nkind: [")
    loaded = load_paths([tmp_path])
    update = FileSource(tmp_path).load()
    assert {o.ref: o for o in loaded.objects} == {o.ref: o for o in update.snapshot.all()}
    assert [str(e) for e in loaded.errors] == [str(e) for e in update.errors]


async def test_a_small_edit_never_queues_behind_big_files(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Big files that hold every parse thread (here: parses held until the test lets them go)
    do not delay an edit of a small file: small files have parse threads of their own."""
    from podway.sources import files

    release = threading.Event()
    real = files.read_manifest

    def held(path: Path, **kwargs: Any) -> Any:
        if path.name.startswith("big"):
            release.wait(30)
        return real(path, **kwargs)

    monkeypatch.setattr(files, "read_manifest", held)
    (tmp_path / "small.yaml").write_text(SVC.format(name="small", port=1))
    source = FileSource(tmp_path, parse_workers=2)
    updates = source.watch(debounce_ms=5)
    try:
        await anext(updates)
        pad = "#" * files.SMALL_FILE + "\n"  # past the small-file size: the big lane
        for i in range(3):  # more big files than the big lane has threads
            (tmp_path / f"big-{i}.yaml").write_text(pad + SVC.format(name=f"big-{i}", port=2))
        await asyncio.sleep(0.2)  # their events are in, their parses hold every thread
        (tmp_path / "small.yaml").write_text(SVC.format(name="small", port=3))
        async with asyncio.timeout(10):
            while True:
                update = await anext(updates)
                small = update.snapshot.get(Service, "default", "small")
                if small is not None and small.spec.ports[0].port == 3:
                    break
        assert update.snapshot.get(Service, "default", "big-0") is None  # still held
    finally:
        release.set()
        await updates.aclose()


def test_the_default_limits_admit_50000_plain_objects_in_one_file() -> None:
    """What refuses a file for its size (bytes, then the document count, both checked before
    parsing) admits 50,000 plain objects: the project's own generators write 20,000 to one
    file. A bomb is still refused by bytes, aliases and depth (``test_loader``)."""
    from podway.model import loader

    text = "---\n".join(SVC.format(name=f"svc-{i:05}", port=80 + i % 1000)
                        for i in range(50_000))
    assert loader._over_size(text, loader.DEFAULT_LIMITS) is None
    assert loader._too_many_documents(text, loader.DEFAULT_LIMITS) is None
    assert loader.DEFAULT_LIMITS.max_objects_per_file >= 50_000
