"""The lab's state folder: the one place every lab process and file is recorded.

Layout (``/run/podway/lab/<name>/`` by default, root only, mode 0700)::

    lab.json       the plan (name, node count) and the API port: written by ``lab up`` first
    kubeconfig     for kubectl, the agents and the controller (https://127.0.0.1:PORT, the
                   lab CA, the administrator's token)
    pki/           the lab CA, the API's certificate, the admin token, the token key (``pki``)
    store.json     the API objects (the control plane reloads it when it restarts)
    daemon.pid     the lab daemon, which supervises every other lab process
    api-restarts   how many times the control plane was restarted (``restart-api`` waits on it)
    pids/<what>    one file per process the daemon started (agents, controller, engine, pods)
    logs/<what>.log
    engine/        the engine's private folder (admin socket), xds.sock the controller's xDS
    image          the path of the image archive pods may run from (``lab up --image``)
    images/        that image unpacked (umoci); containers/<pod uid>/ each such pod's files

Invariant: ``lab down`` needs nothing but this folder and the namespace prefix to remove all of
it; ``lab up`` refuses to start while either exists (leftovers).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path

from podway.programs.lab.pki import LabPki
from podway.programs.lab.plan import LabPlan, make_plan

DEFAULT_ROOT = Path("/run/podway/lab")


@dataclass(frozen=True, slots=True)
class LabState:
    root: Path

    @classmethod
    def of(cls, name: str, state_dir: Path | None = None) -> LabState:
        return cls(state_dir if state_dir is not None else DEFAULT_ROOT / name)

    @property
    def info(self) -> Path:
        return self.root / "lab.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def store(self) -> Path:
        return self.root / "store.json"

    @property
    def api_restarts(self) -> Path:
        return self.root / "api-restarts"

    @property
    def daemon_pid(self) -> Path:
        return self.root / "daemon.pid"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def xds_socket(self) -> Path:
        return self.root / "xds.sock"

    @property
    def engine_dir(self) -> Path:
        return self.root / "engine"

    @property
    def image_file(self) -> Path:
        return self.root / "image"

    @property
    def image_archive(self) -> Path | None:
        """The OCI image archive (``./dev image``) pods of that image run from as containers."""
        with contextlib.suppress(OSError):
            return Path(self.image_file.read_text().strip())
        return None

    @property
    def chart_marker(self) -> Path:
        """Present when the lab runs Podway from its Helm chart (``lab up --install``): the
        daemon then starts no controller, engine or agents of its own."""
        return self.root / "chart"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def containers(self) -> Path:
        return self.root / "containers"

    @property
    def npl_key(self) -> Path:
        """The key the lab's agents sign NodePortLocal annotations with and its controller
        checks (``--npl-key``); made 0600 on first use."""
        path = self.root / "npl.key"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32))
        return path

    @property
    def pki(self) -> LabPki:
        """The lab's CA, the API's certificate and the credentials (``pki``)."""
        return LabPki(self.root / "pki")

    def create(self, plan: LabPlan, api_port: int) -> None:
        self.root.mkdir(parents=True, mode=0o700)
        for sub in (self.pids, self.logs):
            sub.mkdir(mode=0o700)
        self.info.write_text(json.dumps({**plan.to_json(), "api_port": api_port}))
        pki = self.pki.ensure()
        self.kubeconfig.touch(mode=0o600)
        self.kubeconfig.write_text(kubeconfig(api_port, plan.name, ca=pki.ca_cert.read_bytes(),
                                              token=pki.admin_token))

    def exists(self) -> bool:
        return self.root.exists()

    def load(self) -> tuple[LabPlan, int]:
        data = json.loads(self.info.read_text())
        return make_plan(str(data["name"]), int(data["nodes"])), int(data["api_port"])

    def record(self, what: str, pid: int) -> None:
        (self.pids / what).write_text(str(pid))

    def forget(self, what: str) -> None:
        (self.pids / what).unlink(missing_ok=True)

    def recorded(self) -> dict[str, int]:
        if not self.pids.exists():
            return {}
        out = {}
        for path in self.pids.iterdir():
            try:
                out[path.name] = int(path.read_text())
            except (OSError, ValueError):
                continue
        return out

    def daemon(self) -> int | None:
        """The daemon's pid if it is running."""
        try:
            pid = int(self.daemon_pid.read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for us.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill(pid: int, sig: signal.Signals = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def kubeconfig(port: int, name: str, *, ca: bytes, token: str,
               server: str | None = None) -> str:
    """A kubeconfig for the lab's API: HTTPS on loopback (or ``server``), trusting the lab's
    CA, with a bearer token (the administrator's, or a ServiceAccount's)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": f"podway-lab-{name}",
        "clusters": [{"name": f"podway-lab-{name}",
                      "cluster": {"server": server or f"https://127.0.0.1:{port}",
                                  "certificate-authority-data":
                                      base64.b64encode(ca).decode()}}],
        "users": [{"name": "lab", "user": {"token": token}}],
        "contexts": [{"name": f"podway-lab-{name}",
                      "context": {"cluster": f"podway-lab-{name}", "user": "lab",
                                  "namespace": "default"}}]}, indent=1) + "\n"
