"""Replica assignment for new topics: Kafka's rack-unaware algorithm, as a pure function.

This is ``AdminUtils.assignReplicasToBrokersRackUnaware``. Brokers are sorted by id; partition p's
first replica (its preferred leader) is broker ``(p + start_index) % n``, so leaders go round-robin
and no broker leads more than one partition above any other. The other replicas follow the first
at a shift ``1 + (replica_shift + j) % (n - 1)``; the shift grows by one every n partitions, so
followers are spread too, and since the shift is never a multiple of n no partition places two
replicas on one broker. ``start_index`` and ``replica_shift`` are random unless given, so topics
created one after another do not all put partition 0's leader on the same broker.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from broker_core.metadata.errors import InvalidPartitionsError, InvalidReplicationFactorError


def assign_replicas_rack_unaware(
    num_partitions: int,
    replication_factor: int,
    broker_ids: Iterable[int],
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Replica lists for partitions ``start_partition .. start_partition + num_partitions - 1``.

    Element i of the result is the replica list of partition ``start_partition + i``, preferred
    leader first. Raises InvalidPartitionsError if num_partitions < 1 and
    InvalidReplicationFactorError unless 1 <= replication_factor <= number of distinct brokers.
    """
    brokers = sorted(set(broker_ids))
    if num_partitions < 1:
        raise InvalidPartitionsError(num_partitions)
    if not 1 <= replication_factor <= len(brokers):
        raise InvalidReplicationFactorError(replication_factor, len(brokers))
    n = len(brokers)
    chooser = rng if rng is not None else random.Random()
    first_index = start_index if start_index is not None else chooser.randrange(n)
    shift = replica_shift if replica_shift is not None else chooser.randrange(n)
    assignment = []
    for partition in range(max(0, start_partition), max(0, start_partition) + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first_replica = (partition + first_index) % n
        replicas = [brokers[first_replica]]
        for j in range(replication_factor - 1):
            follower_shift = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first_replica + follower_shift) % n])
        assignment.append(replicas)
    return assignment
