"""Where snapshots come from: a folder of manifests (``files``, reading through ``manifests``)
or, later, the Kubernetes API.

Every source produces the same thing — a stream of immutable ``Snapshot`` objects — so nothing
downstream knows which one ran.
"""
