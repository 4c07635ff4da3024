"""The NodePortLocal agent: every selected local pod gets its own ``NodeIP:port``.

Layers, outermost first: ``main`` (the process: API client, kernel backend, metrics server) →
``controller`` (informers from ``podway.kube``, the work queue and workers: all the I/O with the
API server) → ``reconcile`` (pure decisions) → ``ports`` (the port table and socket
reservations) and ``rules`` (kernel DNAT backends). Antrea's pod annotation codec is shared with
the load-balancer side in ``podway.model.npl``; ``events`` builds Kubernetes Events, ``metrics``
serves ``/metrics`` and ``/healthz``.
"""
