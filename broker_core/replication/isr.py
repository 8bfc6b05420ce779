"""Leader side of replication: keeping the in-sync replica set honest (Kafka's AlterPartition).

Every `interval` the leader of each partition looks at its followers. A follower in the ISR that
has not caught up to the log end for `replica.lag.time.max.ms` is dropped; a follower outside the
ISR that has reached the high watermark and whose broker is RUNNING (never a fenced or
shutting-down one) is added. A follower whose broker stops RUNNING is not dropped here: the
controller takes a fenced or shutting-down broker out of the ISR of every partition in the pass
that fences it (as KRaft's controller does). Were every leader to drop it too, on seeing the same
fence, the controller's and the leaders' writes of the same partitions would race, and the losing
transactions (up to 97 partitions each) would be cancelled and written again: at 1,000 partitions
that doubled the failover. Each change is one DynamoDB update conditional on the partition epoch
the leader knows: if the controller or anyone else changed the partition first, the write fails and
the leader re-reads the metadata instead of overwriting it.

Until the controller's write lands, a leader does not wait for an ISR member whose broker its
metadata shows FENCED (`Partition.exclude_fenced`, KIP-903's rule): acks=all writes go on with the
members that live. Such a member stays uncounted while it is in the stored ISR, even once its broker
registers again; this check then drops it, or counts it again once it has caught up.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from broker_core.metadata.errors import MetadataError
from broker_core.metadata.state import BrokerState, PartitionState

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext
    from broker_core.server.partition import Partition

log = logging.getLogger(__name__)


def _fields(partition: Partition, **more: object) -> dict[str, object]:
    """The structured fields of a log event about ``partition`` (floe.log.format=json)."""
    return {"topic": partition.topic, "partition": partition.index, "epoch": partition.leader_epoch, **more}


def proposed_isr(partition: Partition, live_brokers: set[int], lag_max_ms: float, now_ms: float) -> tuple[int, ...]:
    """The ISR the leader should ask for now (the current one when nothing should change)."""
    me = partition.broker_id
    isr = []
    for replica in partition.replicas:
        if replica == me:
            isr.append(replica)
            continue
        state = partition.followers.get(replica)
        if replica in partition.fenced_out and replica in live_brokers:
            # Fenced, then registered again while still in the stored ISR: a new incarnation, in the
            # ISR only once it has caught up, as a follower joining it (see Partition.exclude_fenced).
            if state is not None and state.log_end_offset >= max(partition.high_watermark,
                                                                 partition.leader_epoch_start_offset):
                isr.append(replica)
            continue
        if replica in partition.isr:
            # Liveness is the controller's to act on (see the module doc); lag is the leader's.
            lagging = state is None or now_ms - state.caught_up_ms() > lag_max_ms
            if not lagging:
                isr.append(replica)
        elif (state is not None and replica in live_brokers
              and state.log_end_offset >= max(partition.high_watermark, partition.leader_epoch_start_offset)):
            isr.append(replica)
    return tuple(isr)


def next_isr_check_ms(partition: Partition, lag_max_ms: float) -> float:
    """When the ISR of a leader whose ISR should not change now may next need to: at once while a
    replica is out of it (it may catch up at any fetch, or its broker come back); else when its
    least recently caught-up follower would pass ``replica.lag.time.max.ms``, if it fetches no more.
    A follower's caught-up time only moves forward, so checking then is never late, and a role or
    ISR change makes the partition due at once (`Partition.update_isr`, `become_leader`)."""
    due = math.inf
    for replica in partition.replicas:
        if replica == partition.broker_id:
            continue
        state = partition.followers.get(replica)
        if replica not in partition.isr or replica in partition.fenced_out or state is None:
            return 0.0
        due = min(due, state.caught_up_ms() + lag_max_ms)
    return due


class IsrManager:
    """The leader's side of ISR changes for every partition this broker leads (see the module doc).

    Runs on the broker's event loop, one `run_once` at a time; each change is written through the
    metadata store in a worker thread. A pass looks only at partitions whose ISR may change by now
    (`next_isr_check_ms`): at 1,000 replicas with every follower caught up, each leader's partition
    about once per ``replica.lag.time.max.ms`` instead of every pass.
    """

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    async def run_once(self) -> None:
        image = self.context.image
        live = {b.broker_id for b in image.brokers.values() if b.state is BrokerState.RUNNING}
        lag_max = self.context.config.get_int("replica.lag.time.max.ms")
        now = time.monotonic() * 1000
        changes: list[tuple[Partition, PartitionState]] = []
        # One comprehension picks the due partitions: at 1,000 replicas nearly none is, and this line is
        # then the whole pass (four times a second), so the loop below runs only for the due ones.
        due = [p for p in self.context.replicas.partitions.values() if p.isr_check_due_ms <= now]
        for partition in due:
            if not partition.is_leader:
                partition.isr_check_due_ms = math.inf  # until it becomes leader again
                continue
            new_isr = proposed_isr(partition, live, lag_max, now)
            if set(new_isr) == set(partition.isr):
                # Excluded members the check keeps are live and caught up, or fenced (the controller's).
                partition.readmit(live.intersection(partition.fenced_out))
                partition.isr_check_due_ms = next_isr_check_ms(partition, lag_max)
                continue
            state = image.partitions.get((partition.topic, partition.index))
            if state is None or state.leader_epoch != partition.leader_epoch:
                continue
            changes.append((partition, replace(state, isr=new_isr)))
        if changes:
            await self._alter(changes)

    async def _alter(self, changes: list[tuple[Partition, PartitionState]]) -> None:
        """One batched AlterPartition for every partition whose ISR should change (KIP-841-style)."""
        store = self.context.store
        try:
            result = await asyncio.to_thread(
                store.update_partitions, [(proposed, partition.partition_epoch) for partition, proposed in changes])
        except MetadataError as exc:
            log.warning("ISR change of %d partitions failed: %s", len(changes), exc)
            return
        by_key = {(p.topic, p.index): p for p, _ in changes}
        for written in result.written:
            partition = by_key[(written.topic, written.partition)]
            log.info("%s-%d: ISR %s -> %s (partition epoch %d)", partition.topic, partition.index, partition.isr,
                     written.isr, written.partition_epoch,
                     extra=_fields(partition, previous_isr=list(partition.isr), isr=list(written.isr),
                                   partition_epoch=written.partition_epoch))
            if len(written.isr) < len(partition.isr):
                self.context.metrics.isr_shrinks.inc()
            elif len(written.isr) > len(partition.isr):
                self.context.metrics.isr_expands.inc()
            partition.update_isr(tuple(written.isr), written.partition_epoch)
        if result.conflicted:
            # The controller (or a newer leader) changed these first: learn what it wrote.
            log.info("ISR change of %d partitions lost a race; re-reading metadata", len(result.conflicted))
            await self.context.refresh_metadata(unless_at=await asyncio.to_thread(store.metadata_version))
