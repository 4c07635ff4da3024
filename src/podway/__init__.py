"""Podway: north-south load balancing for Kubernetes, straight to the pods.

Layers point one way: ``cli`` → (``sources``, ``agent``, ``xds``, ``engine``) → ``translate`` →
``model`` / ``ir``. ``translate``, ``model`` and ``ir`` do no I/O.
"""

__version__ = "0.1.0"

# kubernetes-asyncio's generated client loads on demand in every Podway process (about 17 MiB
# less resident memory): see podway.kube.lazy_client. Before anything imports the client.
from podway.kube.lazy_client import install as _lazy_kube_client

_lazy_kube_client()
