"""Starting Envoy (fork + exec) from a process that uses gRPC prints nothing: gRPC's fork
handlers are off before any module can import grpc, because ``podway/__init__.py`` (the
package's first code) turns them off. Set in ``podway.envoy.xds`` instead, a module importing grpc
before ``podway.envoy.xds`` (the engine's health reporter) left them on, and the demo printed "Other
threads are currently calling into gRPC, skipping fork() handlers"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


def test_grpc_fork_handlers_are_off_before_grpc_can_be_imported() -> None:
    code = ("import os, sys; import podway;"
            "print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), 'grpc' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    assert done.stdout.split() == ["false", "False"]
