"""The NodePortLocal agent: every selected local pod gets its own ``NodeIP:port``.

Layers, outermost first: ``controller`` (informers, queue, workers: all the I/O with the API
server) → ``reconcile`` (pure decisions) → ``ports`` (the port table and socket reservations) and
``rules`` (kernel DNAT backends) → ``annotation`` (Antrea's pod annotation codec).
"""
