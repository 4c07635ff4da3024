"""Podway: north-south load balancing for Kubernetes, straight to the pods.

Layers point one way: ``cli`` → (``sources``, ``agent``, ``xds``, ``engine``) → ``translate`` →
``model`` / ``ir``. ``translate``, ``model`` and ``ir`` do no I/O.
"""

__version__ = "0.1.0"

import os

# Envoy (and every other child) is started with fork+exec; gRPC's fork handlers only print a
# line to stderr for that ("Other threads are currently calling into gRPC, skipping fork()
# handlers"). Set before any module imports grpc: here, the package's first code.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# kubernetes-asyncio's generated client loads on demand in every Podway process (about 30 MiB
# less resident memory), and its sub-packages Podway never uses not at all (~3 MiB): see
# podway.kube.lazy_client. Before anything imports the client.
from podway.kube.lazy_client import install as _lazy_kube_client

_lazy_kube_client()
