"""The first load's big files parsed in a second process (``podway.sources.prefetch``), and a
stopping file source ending the parses in flight.

The worker's documents are the loader's own (``load_documents``) for exactly the bytes the
main process reads; anything else (a small file, anchors, a file changed since, broken YAML,
no worker at all) is parsed by the main process, with the same values and errors."""

from __future__ import annotations

import asyncio
import datetime
import io
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from podway.model import EndpointSlice, Service
from podway.model.loader import Stopped, load_documents, load_text
from podway.sources import prefetch as prefetch_module
from podway.sources.files import FileSource
from podway.sources.manifests import read_manifest
from podway.sources.prefetch import Prefetch, digest, read_frame, worker

PAIR = """apiVersion: v1
kind: Service
metadata: {{name: s{i}, namespace: big}}
spec: {{ports: [{{name: http, port: 80, targetPort: 8080}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: s{i}-x, namespace: big, labels: {{kubernetes.io/service-name: s{i}}}}}
ports: [{{name: http, port: 8080}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
"""


def _text(pairs: int) -> str:
    return "---\n".join(PAIR.format(i=i) for i in range(pairs))


def _frames(data: bytes) -> list[tuple[object, ...]]:
    stream, out = io.BytesIO(data), []
    while (frame := read_frame(stream)) is not None:
        out.append(frame)
    assert stream.tell() == len(data)
    return out


def test_the_worker_sends_its_plan_then_the_loader_s_documents_of_each_big_file(
        tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(_text(50))
    (tmp_path / "small.yaml").write_text(PAIR.format(i=1))
    (tmp_path / "anchored.yaml").write_text(_text(40) + "---\nkind: X\nx: &a 1\ny: *a\n")
    (tmp_path / "broken.yaml").write_text(_text(40) + "---\nkind: [unclosed\n")
    (tmp_path / ".hidden.yaml").write_text(_text(60))
    out = io.BytesIO()
    worker(tmp_path, 4096, out, prefetch_module._load_yaml_fast())
    frames = _frames(out.getvalue())
    plan = frames[0]
    assert plan[0] == "plan"
    assert sorted(plan[1]) == sorted(str(p.resolve()) for p in (  # type: ignore[arg-type]
        big, tmp_path / "anchored.yaml", tmp_path / "broken.yaml"))
    sent = {f[0]: f for f in frames[1:]}
    data = big.read_bytes()
    assert sent[str(big.resolve())] == (str(big.resolve()), digest(data),
                                        load_documents(data.decode()))
    assert sent[str((tmp_path / "anchored.yaml").resolve())][2] is None
    assert sent[str((tmp_path / "broken.yaml").resolve())][2] is None


def test_frames_go_marshalled_and_pickled_only_with_a_value_marshal_cannot_write() -> None:
    """Plain documents cross the pipe marshalled (cheap to write); a timestamp (YAML builds a
    datetime for an unquoted one) sends its frame pickled, and both arrive equal."""
    plain = ("/m/a.yaml", b"d" * 16, [{"kind": "Service", "n": 1, "ok": True, "x": None}])
    stamped = ("/m/b.yaml", b"e" * 16, load_documents("at: 2026-12-06T10:00:00Z\n"))
    assert isinstance(stamped[2][0][0]["at"], datetime.datetime)
    out = io.BytesIO()
    prefetch_module._send(out, plain)
    prefetch_module._send(out, stamped)
    data = out.getvalue()
    header = prefetch_module._HEADER
    first_size, first_form = header.unpack(data[:header.size])
    assert first_form == b"m"
    assert header.unpack_from(data, header.size + first_size)[1] == b"p"
    assert _frames(data) == [plain, stamped]


def test_objects_from_the_worker_s_documents_are_the_loader_s(tmp_path: Path) -> None:
    """Through a real worker process: the same objects, errors and warnings as a plain read;
    the documents were taken from the worker (``used``)."""
    big = tmp_path / "big.yaml"
    big.write_text(_text(300) + "---\nkind: Unknown\napiVersion: x/v1\n---\n"
                   "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {ports: x}\n"
                   "---\napiVersion: v1\nkind: Service\nmetadata: {name: stamped, namespace: "
                   "big, creationTimestamp: 2026-12-06T10:00:00Z}\n")  # a datetime: pickled
    prefetch = Prefetch(tmp_path, min_bytes=4096)
    try:
        with_worker = read_manifest(big, built=lambda data: prefetch.take(big, data))
        assert prefetch.used == 1
    finally:
        prefetch.close()
    alone = read_manifest(big)
    assert with_worker.objects == alone.objects
    assert (with_worker.errors, with_worker.warnings) == (alone.errors, alone.warnings)
    assert len(alone.objects) == 601
    assert alone.errors


def test_bytes_other_than_the_worker_s_are_parsed_here(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(_text(100))
    prefetch = Prefetch(tmp_path, min_bytes=4096)
    try:
        changed = _text(101).encode()
        assert prefetch.take(big, changed) is None  # the worker parsed other bytes
        assert prefetch.take(tmp_path / "small.yaml", b"x") is None  # below min_bytes
        assert prefetch.used == 0
    finally:
        prefetch.close()


def test_no_worker_means_a_plain_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(_text(100))
    monkeypatch.setattr(prefetch_module.sys, "executable", str(tmp_path / "no-such-python"))
    prefetch = Prefetch(tmp_path, min_bytes=4096)
    assert prefetch.take(big, big.read_bytes()) is None
    prefetch.close()


async def test_a_file_source_with_a_prefetch_loads_the_same_and_closes_it(
        tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text(_text(200))
    (tmp_path / "small.yaml").write_text(PAIR.format(i=9999))
    prefetch = Prefetch(tmp_path, min_bytes=4096)
    source = FileSource(tmp_path, prefetch=prefetch)
    updates = source.watch()
    try:
        first = await anext(updates)
    finally:
        await updates.aclose()
    plain = FileSource(tmp_path).load()
    assert prefetch.used == 1
    assert source.prefetch is None
    assert prefetch._process is None
    assert sorted(str(o.ref) for o in first.snapshot.all()) == sorted(
        str(o.ref) for o in plain.snapshot.all())
    assert first.snapshot.get(Service, "big", "s199") is not None
    assert first.snapshot.get(EndpointSlice, "big", "s9999-x") is not None


def test_a_load_stops_between_documents() -> None:
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        return calls > 3

    with pytest.raises(Stopped):
        load_text(_text(1000), stop=stop)
    assert calls == 4  # asked once per document until it said stop


async def test_a_watch_that_ends_stops_its_parse_in_flight(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The first load's parse is under way when the watch is closed: the parse stops at its
    next document (it returns no objects) instead of running on in its thread."""
    (tmp_path / "big.yaml").write_text(_text(2000))
    started, finished, results = threading.Event(), threading.Event(), []
    real = read_manifest

    def slow(path: Path, **kwargs: object) -> object:
        stop = kwargs["stop"]
        started.set()
        while not stop():  # type: ignore[operator]
            threading.Event().wait(0.01)  # the watch is closed meanwhile
        try:
            results.append(real(path, **kwargs))  # type: ignore[arg-type]
        except Stopped:
            results.append("stopped")
            raise
        finally:
            finished.set()
        return results[-1]

    monkeypatch.setattr("podway.sources.files.read_manifest", slow)
    source = FileSource(tmp_path)
    updates = source.watch()
    task = asyncio.create_task(anext(updates))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        await asyncio.to_thread(finished.wait)
    assert results == ["stopped"]


def test_a_worker_alive_but_silent_is_given_up_after_its_patience(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that runs but never answers (stuck) must not stall the first load: after
    ``patience_s`` with nothing from it, the main process parses the file itself."""
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(prefetch_module, "__file__", str(silent))
    big = tmp_path / "big.yaml"
    big.write_text(_text(2000))
    data = big.read_bytes()
    prefetch = Prefetch(tmp_path)
    prefetch.patience_s = 0.5
    try:
        started = time.monotonic()
        assert prefetch.take(big, data) is None
        assert time.monotonic() - started < 5
    finally:
        prefetch.close()


@pytest.mark.parametrize(("set_flags", "flags"), [
    ((0, 0, 0), []), ((1, 1, 1), ["-I"]), ((0, 1, 1), ["-E", "-s"]), ((0, 0, 1), ["-s"])])
def test_the_worker_runs_as_isolated_as_podway(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, set_flags: tuple[int, int, int],
        flags: list[str]) -> None:
    """A Podway started with ``-I`` (or ``-E``/``-s``) starts its worker so too: no
    ``PYTHONPATH``, no user site-packages in the child either (``isolation_flags``; the lab's
    daemon is started with them as well)."""
    started: list[list[str]] = []

    def popen(argv: list[str], **_: object) -> None:
        started.append(argv)
        raise OSError("not started: the test reads the command line only")

    isolated, no_env, no_user_site = set_flags
    monkeypatch.setattr(sys, "flags", types.SimpleNamespace(
        isolated=isolated, ignore_environment=no_env, no_user_site=no_user_site))
    monkeypatch.setattr(prefetch_module.subprocess, "Popen", popen)
    Prefetch(tmp_path).close()
    [argv] = started
    assert argv[0] == sys.executable
    assert argv[1:argv.index("-P")] == flags
