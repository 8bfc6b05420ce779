"""KIP-392 fetch from the closest replica: which replica a consumer should read a partition from.

A leader with ``replica.selector.class`` set answers a consumer's Fetch (v11+, which carries the
consumer's ``rack_id``, librdkafka's and the Java client's ``client.rack``) with a preferred read
replica instead of records when another replica suits the consumer better; the consumer then
fetches from that replica, which serves reads up to its own high watermark. The choice is Kafka's
RackAwareReplicaSelector: the leader if it is in the consumer's rack or no candidate is; else the
candidate in the consumer's rack with the highest log end offset (then the one caught up most
recently). Candidates are, as in Kafka's ReplicaManager, the leader and the live in-sync followers
whose log holds the fetch offset (log start <= offset <= log end). LeaderSelector, and an unset
selector, always keep the consumer on the leader.

Pure functions over the leader's view of its followers; the request handler calls them on the
broker's event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
SELECTORS = ("", LEADER_SELECTOR, RACK_AWARE_SELECTOR)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica as the leader sees it: where its log ends and starts, how long since it was caught up."""

    broker_id: int
    log_end_offset: int
    log_start_offset: int
    time_since_caught_up_ms: float


def preferred_read_replica(selector: str, client_rack: str, leader_id: int, isr: tuple[int, ...],
                           followers: Mapping[int, ReplicaView], racks: Mapping[int, str | None],
                           fetch_offset: int) -> int:
    """The broker id the consumer should fetch from, or -1 to stay on the leader.

    ``racks`` maps the live brokers to their racks (a broker missing from it is not a candidate);
    ``followers`` holds the leader's view of each follower.
    """
    if selector != RACK_AWARE_SELECTOR or not client_rack:
        return -1
    if racks.get(leader_id) == client_rack:
        return -1
    same_rack = [
        view for broker_id, view in followers.items()
        if broker_id != leader_id and broker_id in isr and racks.get(broker_id) == client_rack
        and view.log_start_offset <= fetch_offset <= view.log_end_offset
    ]
    if not same_rack:
        return -1
    best = max(same_rack, key=lambda v: (v.log_end_offset, -v.time_since_caught_up_ms, -v.broker_id))
    return best.broker_id
