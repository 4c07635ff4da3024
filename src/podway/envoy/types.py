"""xDS type URLs and the order in which resource types are pushed.

Pushing clusters before endpoints and listeners before routes (and secrets before listeners that
need them) lets Envoy warm each resource as soon as it arrives, with no window where a route
points at a cluster Envoy does not know yet.
"""

from __future__ import annotations

from typing import Final

LISTENER: Final = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE: Final = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
#: Scoped routes (SRDS): each scope names the route table for one exact hostname
#: (``podway.envoy.config.scoped``); served to delta streams only.
SCOPE: Final = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
CLUSTER: Final = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT: Final = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
SECRET: Final = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
#: Filter configs found over ADS (ECDS): the JWT filter's providers
#: (``podway.envoy.config.jwt``), so changing them never changes a listener.
EXTENSION: Final = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"

#: Push order: a resource's dependencies go first.
#: (A scope before the route table it names: Envoy asks for the table once it has the scope.)
#: (A filter config before the listeners that name it: they would wait for it.)
PUSH_ORDER: Final = (CLUSTER, ENDPOINT, SECRET, EXTENSION, LISTENER, SCOPE, ROUTE)

#: Types Envoy subscribes to as a wildcard (all resources); the others are requested by name.
WILDCARD_TYPES: Final = frozenset({LISTENER, CLUSTER, SCOPE})

SHORT_NAMES: Final = {LISTENER: "listeners", ROUTE: "routes", CLUSTER: "clusters",
                      ENDPOINT: "endpoints", SECRET: "secrets", SCOPE: "scopes",
                      EXTENSION: "extensions"}
