"""The state folder: private, owned by one Podway at a time, cleaned on stop, swept when a
dead Podway left an ephemeral one; the identity record never matches a recycled pid."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.envoy.engine import state as state_module
from podway.envoy.engine.adopt import (
    Identity,
    open_pidfd,
    read_identity,
    start_time,
    write_identity,
)
from podway.envoy.engine.state import instance_dir, open_state


def test_the_folder_is_private_locked_and_emptied_on_stop(short_dir: Path) -> None:
    """0700, one holder at a time (a second gets one clear line), and gone after a clean stop."""
    folder = short_dir / "inst"
    with open_state(folder) as state:
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        write_identity(state, Identity(pid=1, started=1, config_hash="h"))
        state.log.write_text("x")
        with pytest.raises(ConfigError, match="another Podway"), open_state(folder):
            pass
        assert state.identity.exists()  # the refused second holder removed nothing
    assert not folder.exists()


def test_a_lock_left_by_a_killed_podway_is_free(short_dir: Path) -> None:
    """The lock dies with its process (kill -9 included): the next start takes the folder."""
    folder = short_dir / "inst"
    code = ("import sys, os; from podway.envoy.engine.state import open_state\n"
            "from pathlib import Path\n"
            "with open_state(Path(sys.argv[1])): os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", code, str(folder)], check=False, timeout=60)
    assert done.returncode == -9
    assert (folder / "podway.lock").exists()  # left behind by the kill ...
    with open_state(folder):  # ... and reused
        pass


def test_a_too_open_folder_of_ours_is_closed_and_a_foreign_one_refused(short_dir: Path) -> None:
    """An existing folder of ours with group/other access is made 0700; one owned by another
    user, or a symlink, is refused."""
    folder = short_dir / "inst"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    with open_state(folder):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    if os.geteuid() == 0:
        folder.mkdir()
        os.chown(folder, 65534, 65534)
        with pytest.raises(ConfigError, match="belongs to uid 65534"), open_state(folder):
            pass
        folder.rmdir()
    (short_dir / "elsewhere").mkdir()
    folder.symlink_to(short_dir / "elsewhere")
    with pytest.raises(ConfigError, match="link"), open_state(folder):
        pass


def test_a_path_too_long_for_a_socket_is_one_clear_error(short_dir: Path) -> None:
    with pytest.raises(ConfigError, match="too long"), open_state(short_dir / ("x" * 100)):
        pass


def test_instance_names_are_plain() -> None:
    for bad in ("", "a/b", ".hidden", "x" * 41):
        with pytest.raises(ConfigError, match="--instance"):
            instance_dir(None, bad)
    assert instance_dir(None, "edge").name == "edge"
    assert instance_dir(Path("/srv/pw"), "ignored") == Path("/srv/pw")


def test_ephemeral_folders_of_dead_podways_are_swept(short_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh ephemeral folder removes the unlocked ones a killed Podway left, not live ones."""
    monkeypatch.setattr(state_module, "default_base", lambda: short_dir)
    with open_state(None) as live:
        leftover, young = short_dir / ".tmp-dead", short_dir / ".tmp-young"
        for folder in (leftover, young, live.path):
            folder.mkdir(exist_ok=True)
        (leftover / "podway.lock").touch()
        for folder in (leftover, live.path):
            os.utime(folder, (0, time.time() - 120))  # old enough to be judged by its lock
        with open_state(None) as fresh:
            assert fresh.ephemeral
            assert not leftover.exists()
            assert live.path.exists()
            assert young.exists()  # maybe a Podway that has not locked it yet
        assert not fresh.path.exists()


def test_a_state_folder_that_cannot_be_made_is_one_clear_error(short_dir: Path) -> None:
    (short_dir / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot create the state folder"), \
            open_state(short_dir / "file" / "below" / "inst"):
        pass


def test_the_identity_record_never_matches_a_recycled_pid(short_dir: Path) -> None:
    """A live pid whose start time differs from the record is not our Envoy."""
    with open_state(short_dir / "inst") as state:
        me = os.getpid()
        started = start_time(me)
        assert started is not None
        write_identity(state, Identity(pid=me, started=started, config_hash="h"))
        record = read_identity(state)
        assert record == Identity(pid=me, started=started, config_hash="h")
        fd = open_pidfd(record)
        assert fd is not None
        os.close(fd)
        assert open_pidfd(Identity(pid=me, started=started + 1, config_hash="h")) is None
        state.identity.write_text("{not json")
        assert read_identity(state) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_a_pods_shared_volume_is_taken_as_it_is_only_when_said() -> None:
    """The chart's engine runs as uid 10001 on an emptyDir, which the kubelet makes root-owned
    with mode 0777: plain --state-dir refuses it (the engine never started in the lab's
    install); --state-dir-shared takes it, and Podway's own files in it are 0600 and its."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="pw-shared-", dir="/tmp"))  # pytest's tmp is root's
    try:
        os.chmod(top, 0o755)
        volume = top / "run-podway"
        volume.mkdir()
        os.chmod(volume, 0o777)  # as the kubelet makes an emptyDir (root-owned)
        os.setegid(10001)
        os.seteuid(10001)  # as the engine's container
        try:
            with pytest.raises(ConfigError, match="belongs to uid 0"), open_state(volume):
                pass
            with open_state(volume, shared=True) as state:
                lock = os.stat(state.lock)
                assert (lock.st_uid, stat.S_IMODE(lock.st_mode)) == (10001, 0o600)
        finally:
            os.seteuid(0)
            os.setegid(0)
        assert stat.S_IMODE(os.stat(volume).st_mode) == 0o777  # the volume is left as it was
        link = top / "link"
        link.symlink_to(volume)
        with pytest.raises(ConfigError, match="link"), open_state(link, shared=True):
            pass
    finally:
        shutil.rmtree(top, ignore_errors=True)
