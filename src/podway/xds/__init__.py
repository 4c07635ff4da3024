"""Envoy resources to engines: version them (``cache``), serve them (``server``) over ADS.

The resources themselves are built from the IR by ``podway.envoy_config`` (a pure function);
this layer never looks at Kubernetes objects, so the same code serves a cluster controller and
standalone mode.
"""

import os

# Envoy is started with fork+exec; gRPC's fork handlers only print warnings for that.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
