"""Envoy resources to engines: version them (``cache``), serve them (``server``) over ADS.

The resources themselves are built from the IR by ``podway.envoy.config`` (a pure function);
this layer never looks at Kubernetes objects, so the same code serves a cluster controller and
standalone mode.
"""
