"""Podway's own BGP kinds (``podway.io/v1alpha1``, cluster-scoped): ``VIPPeer``, a BGP session
each selected engine host opens, and ``VIPAdvertisement``, which ``VIPPool`` addresses go to
which peers and with what attributes. The semantics are MetalLB's ``BGPPeer`` and
``BGPAdvertisement`` where they mean the same (docs/vips.md); the names differ because a kind's
name is its key in the kinds table and MetalLB's already hold ``BGPPeer``.

Each engine host's speaker (``podway vip announce-metallb``) reads them live beside MetalLB's
objects and writes each peer's session state per node in ``status.nodes``. The objects load
with any spec; the speaker judges it against ``VIPPeerSpec`` / ``VIPAdvertisementSpec`` (a field
it does not know refused, never ignored), so a bad one is a problem and a Warning Event on the
object, not a failed load of everything else. Durations stay strings (``90s``, ``1m30s``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from podway.model.base import Int, K8sModel, K8sObject, Port
from podway.model.gateway import LabelSelector
from podway.model.policy import PODWAY_GROUP


class _Strict(K8sModel):
    """A field Podway does not know is refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


class SecretRef(_Strict):
    """A ``kubernetes.io/basic-auth`` Secret in the speaker's namespace; its ``password``."""

    name: str


class PeerBFD(_Strict):
    """BFD for the session (BIRD's per-session ``bfd { … }``), timers in milliseconds."""

    receive_interval: Int = Field(default=300, ge=10, le=60000)
    transmit_interval: Int = Field(default=300, ge=10, le=60000)
    detect_multiplier: Int = Field(default=3, ge=2, le=255)
    passive: bool = False


class VIPPeerSpec(_Strict):
    address: str  # the peer's address
    asn: Int = Field(ge=1, le=4294967295)  # the peer's AS
    local_asn: Int = Field(ge=1, le=4294967295, alias="localASN")  # this host's AS
    port: Port | None = None
    source_address: str | None = None
    ebgp_multi_hop: bool = False
    hold_time: str | None = None
    keepalive_time: str | None = None
    password_secret_ref: SecretRef | None = None
    bfd: PeerBFD | None = None
    node_selectors: tuple[LabelSelector, ...] = ()  # none: every engine host


class VIPPeer(K8sObject):
    KIND: ClassVar[str] = "VIPPeer"
    API_GROUPS: ClassVar[tuple[str, ...]] = (PODWAY_GROUP,)
    NAMESPACED: ClassVar[bool] = False
    spec: dict[str, Any] = Field(default_factory=dict)  # judged as a VIPPeerSpec


class VIPAdvertisementSpec(_Strict):
    pools: tuple[str, ...] = ()  # VIPPool names
    pool_selectors: tuple[LabelSelector, ...] = ()  # neither: every VIPPool
    peers: tuple[str, ...] = ()  # VIPPeer names; none: every VIPPeer
    communities: tuple[str, ...] = ()  # 65000:100 or large:1:2:3
    local_pref: Int | None = Field(default=None, ge=0, le=4294967295)
    aggregation_length: Int = Field(default=32, ge=0, le=32)
    aggregation_length_v6: Int = Field(default=128, ge=0, le=128, alias="aggregationLengthV6")
    node_selectors: tuple[LabelSelector, ...] = ()


class VIPAdvertisement(K8sObject):
    KIND: ClassVar[str] = "VIPAdvertisement"
    API_GROUPS: ClassVar[tuple[str, ...]] = (PODWAY_GROUP,)
    NAMESPACED: ClassVar[bool] = False
    spec: dict[str, Any] = Field(default_factory=dict)  # judged as a VIPAdvertisementSpec
