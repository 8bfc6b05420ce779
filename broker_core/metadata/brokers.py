"""BrokerRegistry: broker registrations, their epochs and heartbeats, and fencing by the controller.

A broker registers for a broker epoch drawn from a cluster-wide counter, so each registration of an
id has a larger epoch than the one it replaces; every later write of the broker (heartbeat, state
change) is conditional on that epoch and on not being FENCED. The controller fences a broker whose
heartbeat counter it saw stall, conditional on the heartbeat it observed and on its own controller
epoch (checked on the lease item in the same transaction). A fenced registration is never revived:
the broker registers again.

Thread-safety: as ``broker_core.metadata.tables``: shareable, synchronous, called from worker threads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pynamodb.exceptions import PynamoDBException
from pynamodb.transactions import TransactWrite

from broker_core.clock import wall_clock_ms
from broker_core.dynamodb_tables import CONDITION_FAILED, condition_failed
from broker_core.metadata.errors import (
    BrokerFencedError,
    FencedControllerError,
    InvalidBrokerRegistrationError,
)
from broker_core.metadata.models import BROKER_EPOCH_ITEM, CONTROLLER_INCARNATIONS_ITEM, BrokerItem
from broker_core.metadata.state import BrokerRegistration, BrokerState
from broker_core.metadata.tables import MetadataTables, encode_broker_changes, metadata_failures
from broker_core.security.principal import ANONYMOUS


def _broker_from_item(item: BrokerItem) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=int(item.broker_id),
        broker_epoch=int(item.broker_epoch),
        host=item.host,
        port=int(item.port),
        rack=item.rack,
        state=BrokerState(item.state),
        heartbeat=int(item.heartbeat),
        registered_at_ms=int(item.registered_at_ms),
        endpoints=tuple(sorted(_endpoint(name, address) for name, address in (item.endpoints.as_dict() if item.endpoints else {}).items())),
        principal=item.principal or ANONYMOUS,
    )


def _endpoint(name: str, address: str) -> tuple[str, str, int]:
    host, _, port = address.rpartition(":")
    return name, host, int(port)




class BrokerRegistry(MetadataTables):
    """The brokers table: registration, heartbeat, state changes and fencing of brokers."""

    @metadata_failures
    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None = None,
                        endpoints: Mapping[str, tuple[str, int]] | None = None, *,
                        principal: str = ANONYMOUS) -> int:
        """Register (or re-register) a broker as RUNNING and return its new broker epoch.

        ``principal`` is the one the broker authenticates as to its peers (its inter-broker
        principal): with an authorizer on, replica requests naming this broker id are accepted only
        from it.

        The epoch comes from a cluster-wide counter, so it is larger than any epoch this broker id
        had before; the previous registration, if any, is replaced and thereby fenced. If a
        concurrent registration of the same id drew a larger epoch, this one raises BrokerFencedError.
        """
        if not isinstance(broker_id, int) or broker_id < 0:
            raise InvalidBrokerRegistrationError(broker_id, "broker id must be a non-negative integer")
        if not isinstance(host, str) or not host:
            raise InvalidBrokerRegistrationError(broker_id, "host must be a non-empty string")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidBrokerRegistrationError(broker_id, f"port {port} is outside 1..65535")
        counter_model = self.models.broker_epoch_counter
        counter = counter_model(BROKER_EPOCH_ITEM)
        counter.update(actions=[counter_model.last_epoch.add(1)])
        broker_epoch = int(counter.last_epoch)
        broker = self.models.broker
        item = broker(
            broker_id,
            broker_epoch=broker_epoch,
            host=host,
            port=port,
            rack=rack,
            state=BrokerState.RUNNING.value,
            heartbeat=0,
            registered_at_ms=wall_clock_ms(),
            endpoints={name: f"{h}:{p}" for name, (h, p) in (endpoints or {}).items()} or None,
            principal=principal,
        )
        condition = broker.broker_id.does_not_exist() | (broker.broker_epoch < broker_epoch)

        def build(transaction: TransactWrite) -> None:
            transaction.save(item, condition=condition)

        # Numbered in the change sequence with the whole registration: brokers learn of it (a restarted
        # broker's new epoch and endpoints) from the change item, without reading everything.
        if self.transact_change(f"register broker {broker_id}", build,
                                brokers=encode_broker_changes([_broker_from_item(item)])) is not None:
            raise BrokerFencedError(broker_id, broker_epoch)
        return broker_epoch

    @metadata_failures
    def heartbeat_broker(self, broker_id: int, broker_epoch: int) -> None:
        """Bump the broker's heartbeat counter; BrokerFencedError if fenced or its epoch is stale."""
        broker = self.models.broker
        item = broker(broker_id)
        condition = (broker.broker_epoch == broker_epoch) & (broker.state != BrokerState.FENCED.value)
        try:
            item.update(actions=[broker.heartbeat.add(1)], condition=condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise BrokerFencedError(broker_id, broker_epoch) from err
            raise

    @metadata_failures
    def set_broker_state(self, broker_id: int, broker_epoch: int, state: BrokerState) -> None:
        """Move the broker's registration to ``state``; BrokerFencedError if fenced or stale.

        A fenced registration cannot be revived: the broker registers again for a new epoch.
        """
        broker = self.models.broker
        condition = (broker.broker_epoch == broker_epoch) & (broker.state != BrokerState.FENCED.value)

        def build(transaction: TransactWrite) -> None:
            transaction.update(
                broker(broker_id), actions=[broker.state.set(state.value)], condition=condition
            )

        if self.transact_change(f"set state of broker {broker_id}", build,
                                brokers=encode_broker_changes(states=[(broker_id, broker_epoch, state)])) is not None:
            raise BrokerFencedError(broker_id, broker_epoch)

    @metadata_failures
    def fence_broker(
        self, broker_id: int, broker_epoch: int, observed_heartbeat: int, controller_epoch: int
    ) -> bool:
        """Controller write: fence the registration if it still has ``observed_heartbeat``.

        Returns False (and writes nothing) if the broker heartbeated, re-registered or was already
        fenced since it was observed; raises FencedControllerError if ``controller_epoch`` is stale.
        """
        broker = self.models.broker
        condition = (
            (broker.broker_epoch == broker_epoch)
            & (broker.heartbeat == observed_heartbeat)
            & (broker.state != BrokerState.FENCED.value)
        )

        def build(transaction: TransactWrite) -> None:
            self.add_controller_check(transaction, controller_epoch)
            transaction.update(
                broker(broker_id), actions=[broker.state.set(BrokerState.FENCED.value)], condition=condition
            )

        # In the change sequence: on a failover every broker learns of the fence from the change item
        # (before, a fence made every broker and the controller read every partition again).
        codes = self.transact_change(f"fence broker {broker_id}", build, brokers=encode_broker_changes(
            states=[(broker_id, broker_epoch, BrokerState.FENCED)]))
        if codes is None:
            return True
        if codes[0] == CONDITION_FAILED:
            raise FencedControllerError(controller_epoch)
        return False

    @metadata_failures
    def announce_controller(self, broker_id: int, controller_epoch: int) -> None:
        """Controller write, once per term: number the new holder of the lease in the change sequence,
        so that every broker learns whom Metadata answers should name as the controller from the
        change item (a version bump without one made every broker read everything, on the failover
        path). Raises FencedControllerError if the lease moved past ``controller_epoch`` meanwhile."""
        def build(transaction: TransactWrite) -> None:
            self.add_controller_check(transaction, controller_epoch)

        codes = self.transact_change(f"announce controller {broker_id}", build,
                                     brokers=encode_broker_changes(controller=broker_id))
        if codes is not None:
            raise FencedControllerError(controller_epoch)

    @metadata_failures
    def controller_incarnations(self) -> dict[int, int]:
        """Broker id -> broker epoch as of the last controller's last complete pass (empty if none
        was written): see `Controller` on re-registered brokers."""
        model = self.models.controller_incarnations
        try:
            item = model.get(CONTROLLER_INCARNATIONS_ITEM, consistent_read=True)
        except model.DoesNotExist:
            return {}
        return {int(broker_id): int(epoch) for broker_id, epoch in json.loads(item.brokers).items()}

    @metadata_failures
    def write_controller_incarnations(self, incarnations: Mapping[int, int], controller_epoch: int) -> None:
        """Controller write: record each broker's epoch as counted by this controller; raises
        FencedControllerError if the lease moved past ``controller_epoch``. Not in the change
        sequence: only controllers read it, at the start of a term."""
        model = self.models.controller_incarnations
        item = model(CONTROLLER_INCARNATIONS_ITEM, brokers=json.dumps({str(b): e for b, e in sorted(incarnations.items())}),
                     controller_epoch=controller_epoch)

        def build(transaction: TransactWrite) -> None:
            self.add_controller_check(transaction, controller_epoch)
            transaction.save(item)

        if self.transact("record controller incarnations", build) is not None:
            raise FencedControllerError(controller_epoch)

    @metadata_failures
    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            return _broker_from_item(self.models.broker.get(broker_id, consistent_read=True))
        except self.models.broker.DoesNotExist:
            return None

    @metadata_failures
    def list_brokers(self) -> list[BrokerRegistration]:
        """Every registration, in any state, sorted by broker id (consistent read)."""
        items = self.models.broker.scan(consistent_read=True)
        return sorted((_broker_from_item(i) for i in items), key=lambda b: b.broker_id)
