"""KIP-392's rack-aware choice of a read replica, and how followers are spread over replica fetchers."""

from __future__ import annotations

from broker_core.replication.fetcher import fetcher_index, java_string_hash
from broker_core.server.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    ReplicaView,
    preferred_read_replica,
)

RACKS = {1: "az-a", 2: "az-b", 3: "az-c", 4: "az-b"}


def view(broker_id: int, log_end: int = 100, log_start: int = 0, behind_ms: float = 0.0) -> ReplicaView:
    return ReplicaView(broker_id, log_end, log_start, behind_ms)


def choose(client_rack: str, followers: dict[int, ReplicaView], *, isr: tuple[int, ...] = (1, 2, 3, 4),
           offset: int = 50, selector: str = RACK_AWARE_SELECTOR, racks: dict[int, str] = RACKS) -> int:
    return preferred_read_replica(selector, client_rack, 1, isr, followers, racks, offset)


def test_a_consumer_is_sent_to_the_in_sync_follower_in_its_rack() -> None:
    assert choose("az-c", {2: view(2), 3: view(3)}) == 3


def test_the_leader_keeps_a_consumer_in_its_own_rack_without_a_rack_or_without_a_candidate() -> None:
    assert choose("az-a", {2: view(2), 3: view(3)}) == -1
    assert choose("", {2: view(2), 3: view(3)}) == -1
    assert choose("az-z", {2: view(2), 3: view(3)}) == -1


def test_only_in_sync_live_followers_holding_the_offset_are_candidates() -> None:
    assert choose("az-c", {3: view(3)}, isr=(1, 2)) == -1  # out of the ISR
    assert choose("az-c", {3: view(3, log_end=40)}) == -1  # not yet at the fetch offset
    assert choose("az-c", {3: view(3, log_start=60)}) == -1  # the offset is below its log start
    assert choose("az-c", {3: view(3)}, racks={1: "az-a", 2: "az-b"}) == -1  # not live


def test_the_most_caught_up_follower_of_the_rack_wins() -> None:
    assert choose("az-b", {2: view(2, log_end=90), 4: view(4, log_end=95)}) == 4
    assert choose("az-b", {2: view(2, behind_ms=5), 4: view(4, behind_ms=50)}) == 2


def test_the_leader_selector_and_no_selector_keep_consumers_on_the_leader() -> None:
    assert choose("az-c", {3: view(3)}, selector=LEADER_SELECTOR) == -1
    assert choose("az-c", {3: view(3)}, selector="") == -1


def test_partitions_are_spread_over_fetchers_with_javas_string_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("") == 0
    # Kafka: Utils.abs(31 * "foo".hashCode() + partition) % numFetchers; "foo".hashCode() == 101574.
    assert [fetcher_index("foo", p, 3) for p in range(4)] == [(31 * 101574 + p) % 3 for p in range(4)]
    counts = [0, 0, 0]
    for p in range(999):
        counts[fetcher_index("orders", p, 3)] += 1
    assert counts == [333, 333, 333]
    assert {fetcher_index("orders", p, 1) for p in range(50)} == {0}
