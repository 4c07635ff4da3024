"""IR → Envoy: build xDS resources (``build``), version them (``cache``), serve them (``server``).

This layer only sees the IR (``podway.ir``) — never Kubernetes objects — so the same code serves a
cluster controller and standalone mode.
"""

import os

# Envoy is started with fork+exec; gRPC's fork handlers only print warnings for that.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
