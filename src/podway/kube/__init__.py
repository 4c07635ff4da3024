"""Kubernetes client machinery shared by the agent and the controller.

``client`` sets up an API client (kubeconfig or in-cluster) and maps every setup failure to a
``PodwayError`` with one line to show; ``errors`` maps API failures to typed exceptions;
``backoff`` is the one retry policy (exponential, jittered, honouring Retry-After);
``informer`` lists then watches one resource kind. ``emulator`` is a wire-level API server for
tests and the lab. Nothing here knows about Podway's model or translator.
"""
