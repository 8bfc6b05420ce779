"""The kill-leader fault at 1,000 partitions (issue 26): SIGKILL of the broker leading the most
partitions while an idempotent acks=all producer writes to all of them; every partition must accept
an acks=all write again within two session timeouts, and no acknowledged record may be lost,
duplicated or moved (tests.faults.harness checks the replicas byte for byte afterwards).

From the kill, a probe (``broker_core.client.write_probe``, the one bench/scale_bench.py uses) sends
one-record acks=all Produce requests, to each broker for every partition still waiting that the
surviving brokers' Metadata answers (or a KIP-951 hint) name it the leader of, until each partition
has acknowledged one; the records it gets acknowledged join the producer's in the final check. The
probe asks the brokers, as a client does, not DynamoDB: a Query of 1,000 partition items costs the
local stack's moto seconds, and a probe asking it in a loop starved the brokers' own DynamoDB calls.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from broker_core.client.write_probe import WriteProbe
from tests.faults.harness import SESSION_TIMEOUT_S, TOPIC, FaultCluster, fault_cluster

PARTITIONS_AT_SCALE = 1000
PROBE_TIMEOUT_MS = 5000


def write_probe(cluster: FaultCluster, partitions: int) -> WriteProbe:
    """The probe of ``broker_core.client.write_probe`` (the one bench/scale_bench.py uses) over the live brokers."""
    def live_brokers() -> dict[int, tuple[str, int]]:
        return {b: cluster.address(b) for b, process in cluster.stack.processes.items() if process.alive()}

    return WriteProbe(live_brokers, TOPIC, partitions, security=cluster.security, timeout_ms=PROBE_TIMEOUT_MS)


@pytest.mark.faults
@pytest.mark.timeout(1200)
def test_killing_the_broker_leading_most_of_1000_partitions_moves_them_all_within_two_session_timeouts(
        tmp_path: Path) -> None:
    with fault_cluster(tmp_path, partitions=PARTITIONS_AT_SCALE) as cluster:
        cluster.start_producing()
        led = Counter(p.leader for p in cluster.partitions())
        victim, leading = led.most_common(1)[0]
        probe = write_probe(cluster, PARTITIONS_AT_SCALE)
        started = time.monotonic()
        cluster.stop_broker(victim, signal.SIGKILL)
        asyncio.run(probe.run(started, give_up_after_s=10 * SESSION_TIMEOUT_S))
        slowest = max(probe.accepted_after_s.values(), default=float("inf"))
        outcome = cluster.finish(extra_acked=probe.acknowledged)
    # Safety first, so a failover too slow for the timing goal still shows whether anything was lost.
    outcome.assert_consistent()
    assert not probe.pending, (
        f"{len(probe.pending)} partitions took no acks=all write within {10 * SESSION_TIMEOUT_S:.0f}s of killing "
        f"broker {victim} (leader of {leading}); answers {dict(probe.answers)}")
    assert slowest <= 2 * SESSION_TIMEOUT_S, (
        f"the last partition took an acks=all write {slowest:.1f}s after broker {victim} (leader of {leading}) "
        f"was killed, more than twice the session timeout ({SESSION_TIMEOUT_S:.0f}s); answers {dict(probe.answers)}")
