"""The HAProxy engine: the IR rendered as ``haproxy.cfg`` + map files, run and changed live.

Reads only the IR (``podway.ir``), never Kubernetes objects or the translator (see
``../shared/ARCHITECTURE.md``, "Engines behind one IR"). ``render`` is pure: IR in, the
configuration text, its map/certificate files and a report of what HAProxy cannot serve exactly
out. ``process`` supervises HAProxy in master-worker mode and applies a new rendering as runtime
API commands (members, maps) when only those changed, or as a seamless reload otherwise.
"""
