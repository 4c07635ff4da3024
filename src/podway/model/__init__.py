"""Typed Kubernetes objects Podway reads, their loader and the immutable snapshot.

No I/O: the loader parses text (reading files is ``podway.sources``); no client libraries.
"""

from podway.model.base import K8sObject, ObjectMeta, ObjectRef
from podway.model.core import EndpointSlice, Node, Pod, Secret, Service
from podway.model.networking import Ingress, IngressClass
from podway.model.snapshot import Key, Snapshot

__all__ = [
    "EndpointSlice",
    "Ingress",
    "IngressClass",
    "K8sObject",
    "Key",
    "Node",
    "ObjectMeta",
    "ObjectRef",
    "Pod",
    "Secret",
    "Service",
    "Snapshot",
]
