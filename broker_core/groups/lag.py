"""Consumer lag as the group coordinator reports it: ``kafka_consumergroup_lag`` and ``..._lag_seconds``.

The method is kafka-lag-exporter's. Every ``floe.consumer.lag.sample.ms`` the coordinator reads the
latest offset (ListOffsets LATEST, the high watermark; the local replica's when this broker leads the
partition) of every partition a group it coordinates has committed an offset for, and adds
(latest offset, wall-clock time) to that partition's `OffsetTimeline`: up to TIMELINE_POINTS points,
a run of samples with one offset kept as its first and last point. At scrape time, for each
committed offset:

- lag in offsets: latest sampled offset - committed offset (0 when the group is at or past it);
- lag in seconds: now - the time the log end reached the committed offset, interpolated linearly
  between the samples around it, or extrapolated from the timeline's average rate when the
  committed offset is older than the oldest sample; 0 when there is no lag. With a single sample
  (or none where the offset is) no time lag is reported.

Lag is reported by the broker that coordinates the group (so each group appears once in a
cluster's scrapes) and only for partitions with at least one sample. Runs on the event loop;
ListOffsets goes to each leader over one cached inter-broker connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from broker_core.client.peers import PeerConnections
from broker_core.metrics.families import gauge
from broker_core.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

    from .ownership import GroupOwnership

log = logging.getLogger(__name__)
TIMELINE_POINTS = 60
LATEST = -1


class OffsetTimeline:
    """A partition's log-end offsets over time (offset, wall seconds), oldest first; sans-I/O."""

    def __init__(self, points: int = TIMELINE_POINTS) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=points)

    def add(self, offset: int, at_s: float) -> None:
        """Add a sample. Offsets only grow (a smaller one, after truncation, starts the timeline again);
        a run of equal offsets keeps its first and its latest time."""
        points = self.points
        if points and offset < points[-1][0]:
            points.clear()
        if len(points) >= 2 and points[-1][0] == offset == points[-2][0]:
            points[-1] = (offset, at_s)
        else:
            points.append((offset, at_s))

    @property
    def latest(self) -> int | None:
        return self.points[-1][0] if self.points else None

    def time_of(self, offset: int) -> float | None:
        """When the log end reached ``offset`` (wall seconds), None if the timeline cannot say."""
        points = self.points
        if not points:
            return None
        if offset >= points[-1][0]:
            return points[-1][1]
        if len(points) < 2:
            return None
        first_offset, first_at = points[0]
        if offset < first_offset:
            last_offset, last_at = points[-1]
            if last_offset == first_offset:
                return None
            return first_at - (first_offset - offset) * (last_at - first_at) / (last_offset - first_offset)
        previous = points[0]
        for point in points:
            if point[0] > offset:
                low_offset, low_at = previous
                high_offset, high_at = point
                return low_at + (offset - low_offset) * (high_at - low_at) / (high_offset - low_offset)
            previous = point
        return None


def consumer_lag(latest: int, committed: int, timeline: OffsetTimeline, now_s: float) -> tuple[int, float | None]:
    """(lag in offsets, lag in seconds or None) of a group at ``committed`` on a partition at ``latest``."""
    lag = max(0, latest - committed)
    if lag == 0:
        return 0, 0.0
    reached = timeline.time_of(committed)
    return lag, None if reached is None else max(0.0, now_s - reached)


class ConsumerLag(Collector):
    """Samples log-end offsets for the groups this broker coordinates and reports their lag."""

    def __init__(self, context: BrokerContext, ownership: GroupOwnership,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.context = context
        self.ownership = ownership
        self.wall_clock = wall_clock
        self.timelines: dict[tuple[str, int], OffsetTimeline] = {}
        self._peers = PeerConnections.of_broker(context, "lag")

    # sampling --------------------------------------------------------------------------------

    def _committed(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) for every offset of the groups owned here."""
        for group_id, group in list(self.ownership.groups.items()):
            for (topic, index), committed in list(group.offsets.items()):
                yield group_id, topic, index, committed.offset

    async def sample(self) -> None:
        """Add one sample to the timeline of every partition a group owned here committed to."""
        wanted = {(topic, index) for _, topic, index, _ in self._committed()}
        for key in [k for k in self.timelines if k not in wanted]:
            del self.timelines[key]
        if not wanted:
            return
        image = self.context.image
        me = self.context.config.broker_id
        remote: dict[int, list[tuple[str, int]]] = {}
        for key in sorted(wanted):
            state = image.partitions.get(key)
            if state is None or state.leader < 0:
                continue
            replica = self.context.replicas.get(*key)
            if state.leader == me and replica is not None and replica.is_leader:
                self._add(key, replica.high_watermark)
            else:
                remote.setdefault(state.leader, []).append(key)
        answers = await asyncio.gather(*(self._latest_offsets(leader, keys) for leader, keys in remote.items()),
                                       return_exceptions=True)
        for (leader, _), answer in zip(remote.items(), answers, strict=True):
            if isinstance(answer, BaseException):
                log.debug("lag sample: ListOffsets to broker %d failed: %s", leader, answer)
                self._peers.drop(leader)
                continue
            for key, offset in answer.items():
                self._add(key, offset)

    def _add(self, key: tuple[str, int], offset: int) -> None:
        self.timelines.setdefault(key, OffsetTimeline()).add(offset, self.wall_clock())

    async def _latest_offsets(self, leader: int, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        connection = await self._peers.get(leader)
        if connection is None:
            return {}
        topics: dict[str, list[int]] = {}
        for topic, index in keys:
            topics.setdefault(topic, []).append(index)
        response = await connection.send(ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": name, "partitions": [
                {"partition_index": index, "current_leader_epoch": -1, "timestamp": LATEST} for index in indexes]}
                for name, indexes in topics.items()]})
        return {(t.name, p.partition_index): int(p.offset) for t in response.topics for p in t.partitions
                if p.error_code == ErrorCode.none and p.offset >= 0}

    async def close(self) -> None:
        await self._peers.close()

    # reporting -------------------------------------------------------------------------------

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.wall_clock()
        lags, seconds, offsets = [], [], []
        for group_id, topic, index, committed in self._committed():
            timeline = self.timelines.get((topic, index))
            latest = timeline.latest if timeline is not None else None
            labels = (group_id, topic, str(index))
            offsets.append((labels, committed))
            if timeline is None or latest is None:
                continue
            lag, lag_s = consumer_lag(latest, committed, timeline, now)
            lags.append((labels, lag))
            if lag_s is not None:
                seconds.append((labels, lag_s))
        names = ("group", "topic", "partition")
        yield gauge("kafka_consumergroup_current_offset", "Committed offset of a group, by the group's coordinator",
                    names, offsets)
        yield gauge("kafka_consumergroup_lag", "Latest offset minus the group's committed offset (sampled)", names, lags)
        yield gauge("kafka_consumergroup_lag_seconds",
                    "Seconds since the log end was at the group's committed offset (kafka-lag-exporter's time lag)",
                    names, seconds)

