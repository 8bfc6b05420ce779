"""What the broker's services may use of the broker: a narrow protocol, so none of them imports it.

The request handlers, the replica fetchers, the ISR manager, the group coordinator and the tiering
service each receive a `BrokerContext` when the broker is assembled (`broker_core.server.assembly`).
It offers exactly what they use: the broker's settings, its current `MetadataImage`, the replicas it
hosts, the metadata store, the authorizer, its metrics, and ways to ask for newer metadata. They never reach for anything else on
the broker and never set attributes on each other. Everything here is for tasks on the broker's
event loop; the store's calls block, so callers run them in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker_core.metadata.controller import Controller
    from broker_core.metadata.image import MetadataImage
    from broker_core.metadata.store import MetadataStore
    from broker_core.metrics.broker import BrokerMetrics
    from broker_core.security.authorizer import Authorizer

    from .config import BrokerConfig
    from .replica_manager import ReplicaManager


class BrokerContext(Protocol):
    """The broker as its services see it."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (Kafka's names) and identity."""
        ...

    @property
    def image(self) -> MetadataImage:
        """The newest metadata image this broker applied; replaced whole, never changed in place."""
        ...

    @property
    def replicas(self) -> ReplicaManager:
        """The replicas this broker hosts."""
        ...

    @property
    def store(self) -> MetadataStore:
        """The cluster metadata in DynamoDB (blocking calls: run them in a worker thread)."""
        ...

    @property
    def authorizer(self) -> Authorizer:
        """Decides who may do what (`enabled` False without ``authorizer.class.name``: everyone may)."""
        ...

    @property
    def controller(self) -> Controller | None:
        """The controller role while this broker holds the controller lease, else None (blocking calls)."""
        ...

    @property
    def metrics(self) -> BrokerMetrics:
        """The broker's metrics: services update its families and add collectors of their state."""
        ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def port(self) -> int:
        """The port the Kafka listener is bound to (known once the broker started)."""
        ...

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]:
        """This broker's advertised (host, port) on a listener (`Request.listener_name`; "" for the
        inter-broker one)."""
        ...

    async def refresh_metadata(self, *, unless_at: int | None = None) -> None:
        """Read and apply a new snapshot now (after this broker changed the metadata itself)."""
        ...

    async def catch_up_metadata(self) -> None:
        """Make sure a metadata version check that started after this call has finished."""
        ...

    def recheck_metadata_soon(self, min_interval_s: float) -> None:
        """Start a shared metadata version check without waiting for it."""
        ...
