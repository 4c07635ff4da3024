"""Podway: north-south load balancing for Kubernetes, straight to the pods.

Layers point one way: ``cli`` → (``sources``, ``agent``, ``xds``, ``engine``) → ``translate`` →
``model`` / ``ir``. ``translate``, ``model`` and ``ir`` do no I/O.
"""

__version__ = "0.1.0"
