"""Follower side of replication: `num.replica.fetchers` fetchers per leader broker pull what is followed there.

Partitions are spread over a leader's fetchers as Kafka spreads them (Java's hash of the topic name,
times 31, plus the partition index, modulo the fetcher count), so a partition stays with one
fetcher while the count is unchanged. A fetcher holds one connection to its leader and sends Fetch
requests with this broker's replica id for all its partitions at once (Fetch v12, encoded and
parsed by `protocol.replica_fetch`, the records appended straight from the response's receive
buffer), in a KIP-227 fetch session: after the first (full) request, a request names only the
partitions whose fetch position changed, the leader's answer only the partitions with news, so a
fetcher of 1,000 quiet partitions does not send and parse 1,000 partitions per round trip. A
request whose answer was lost (connection closed, long poll abandoned) makes the next one full.

Before a partition's first fetch under a new leader epoch it asks the leader, with
OffsetForLeaderEpoch, where this replica's latest epoch ends on the leader, and truncates any
divergent tail (KIP-101/279). Fetched batches are appended as they are (offsets and epochs from the leader), the leader's high watermark is adopted up
to the local log end, and the leader's log start offset is followed.

Leader changes are on the failover path, so a fetcher reacts to them without waiting for the regular
metadata poll or a long poll: while its leader cannot be reached or refuses a partition (not the
leader, fenced or unknown epoch), it retries every LEADER_RECHECK_S and asks the broker for a shared
metadata version check at that cadence, for up to two session timeouts (a dead leader is replaced
within about one); a partition that joins a fetcher, or whose leader epoch changes, abandons a
long poll already out for the others so that its truncation and first fetch start at once; and no
long poll lasts past the moment a stalled partition is due to be retried.

Replicas held to the follower replication throttle (`broker_core.quotas.replication`) sit fetches
out while the broker's throttled replicas have fetched more than follower.replication.throttled.rate
allows (the throttle's bucket is in debt), ask for at most a tenth of a second of that rate each, and
come back as soon as the debt is paid: a fetcher with nothing else to fetch sleeps until then, and
one with other partitions long-polls no longer than that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker_core.client import BrokerConnection, ClientError
from broker_core.log.errors import LogError
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.fetch_session import FetchSessionHandler
from broker_core.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, build_entity, request_class
from broker_core.protocol.replica_fetch import (
    FETCH_VERSION,
    FetchedPartition,
    FetchPosition,
    ReplicaFetchFormatError,
    encode_replica_fetch,
    parse_fetch_response,
)
from broker_core.quotas.replication import FOLLOWER_RATE, FOLLOWER_REPLICAS, ReplicationQuota, lists_replica
from broker_core.records.errors import RecordsError

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext
    from broker_core.server.partition import Partition

log = logging.getLogger(__name__)

OFFSET_FOR_LEADER_EPOCH_VERSION = 4
_RETRY_BACKOFF_S = 0.2
# How often a fetcher whose leader is gone or refusing retries and checks the metadata version.
LEADER_RECHECK_S = 0.05
# The longest a fetcher whose every partition is held back by the replication throttle sleeps before
# looking again (the throttle's debt is usually paid back sooner; a rate raised live applies by then).
THROTTLE_BACKOFF_S = 0.1
# While a leader stays unreachable, a fetcher retries every LEADER_RECHECK_S: it says so at most this often.
TROUBLE_LOG_INTERVAL_S = 10.0


@dataclass
class FollowedPartition:
    partition: Partition
    leader_epoch: int
    # Set through the fetcher (`ReplicaFetcher._stall`), which also keeps the stalled partitions apart.
    stalled_until: float = 0.0
    # The position the next fetch asks for; None once the replica changed (the fetcher is marked).
    position: FetchPosition | None = None

    def fetch_position(self, max_bytes: int) -> FetchPosition:
        position = self.position
        if position is None or position.partition_max_bytes != max_bytes:
            partition = self.partition
            position = self.position = FetchPosition(partition.index, self.leader_epoch, partition.log_end_offset,
                                                     partition.log_start_offset, max_bytes)
        return position


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, in signed 32-bit arithmetic."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fetcher_index(topic: str, partition: int, fetchers: int) -> int:
    """Which of a leader's ``fetchers`` fetchers follows a partition: Kafka's
    ``Utils.abs(31 * topic.hashCode() + partition) % numFetchers`` (``Utils.abs`` masks the sign bit)."""
    return ((31 * java_string_hash(topic) + partition) & 0x7FFFFFFF) % fetchers


class ReplicaFetcher:
    """Pulls its share of the partitions this broker follows on one leader, over one connection and
    one fetch session (see the module doc).

    Runs as one task on the broker's event loop; `follow`, `unfollow` and `stop` are called by
    `ReplicaFetcherManager` on the same loop.
    """

    def __init__(self, context: BrokerContext, leader_id: int, fetcher_id: int = 0,
                 throttle: ReplicationQuota | None = None) -> None:
        self.context = context
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.throttle = throttle
        self.partitions: dict[tuple[str, int], FollowedPartition] = {}
        self.session: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
        # What a fetch needs to look at, kept as it changes so that an idle fetch costs nothing per
        # partition: the partitions whose position, membership or stall changed since the last request
        # was built (told to the session handler then), those stalled, and those needing truncation.
        self._changed: set[tuple[str, int]] = set()
        self._stalled: dict[tuple[str, int], FollowedPartition] = {}
        self._truncating: set[tuple[str, int]] = set()
        # The partitions held back or sent with a smaller size by the replication throttle in the last
        # request, and the replica.fetch.max.bytes it used: when either changes, every position is rebuilt.
        self._throttled: set[tuple[str, int]] = set()
        self._max_bytes: int | None = None
        self._connection: BrokerConnection | None = None
        self._task: asyncio.Task | None = None
        self._wakeup = asyncio.Event()
        # Set when a partition joins or changes leader epoch: a long poll already out is abandoned.
        self._membership_changed = asyncio.Event()
        # A refusal mostly means the leader or this broker has not read the latest metadata yet;
        # both will have within one poll interval.
        self._stall_s = context.config.get_int("metadata.poll.interval.ms") / 1000
        self._fast_recheck_window_s = 2 * context.config.get_int("broker.session.timeout.ms") / 1000
        self._trouble_since: float | None = None
        self._trouble_logged_at: float | None = None
        self._unlogged_failures = 0

    def follow(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        current = self.partitions.get(key)
        if current is None or current.leader_epoch != partition.leader_epoch or current.partition is not partition:
            if current is not None and current.partition is not partition:
                current.partition.remove_session(self)
            self.partitions[key] = FollowedPartition(partition, partition.leader_epoch)
            self._stalled.pop(key, None)
            self._truncating.add(key)
            self._changed.add(key)
            # Marked on every append, truncation and log start move: the position is rebuilt only then.
            partition.add_session(self, key)
            self._membership_changed.set()
        else:
            self._unstall(key, current)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}-{self.fetcher_id}")

    def unfollow(self, key: tuple[str, int]) -> None:
        followed = self.partitions.pop(key, None)
        if followed is not None:
            followed.partition.remove_session(self)
            self._stalled.pop(key, None)
            self._truncating.discard(key)
            self._changed.add(key)

    def mark(self, key: tuple[str, int]) -> None:
        """The replica followed as ``key`` changed (`Partition.add_session`): its position is read again."""
        followed = self.partitions.get(key)
        if followed is not None:
            followed.position = None
            self._changed.add(key)

    def _stall(self, f: FollowedPartition, seconds: float) -> None:
        """Skip this partition for a while: its leader refused it; new metadata or time may fix that."""
        f.stalled_until = asyncio.get_running_loop().time() + seconds
        key = (f.partition.topic, f.partition.index)
        if self.partitions.get(key) is f:
            self._stalled[key] = f
            self._changed.add(key)

    def _unstall(self, key: tuple[str, int], f: FollowedPartition) -> None:
        f.stalled_until = 0.0
        if self._stalled.pop(key, None) is not None:
            self._changed.add(key)

    def _set_truncation(self, f: FollowedPartition, needed: bool) -> None:
        """Whether ``f`` must check divergence with the leader before it fetches again (a partition
        followed anew starts with the check; one replaced since ``f`` was chosen keeps its own)."""
        key = (f.partition.topic, f.partition.index)
        if self.partitions.get(key) is not f:
            return
        if needed:
            self._truncating.add(key)
        else:
            self._truncating.discard(key)

    async def stop(self) -> None:
        # Following nothing ends the loop even if the cancellation is lost: Python 3.11's
        # asyncio.wait_for swallows a cancel that arrives just as the awaited response does.
        for key in list(self.partitions):
            self.unfollow(key)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close_connection()

    async def _close_connection(self) -> None:
        # An answer lost with the connection may have moved the session on: start it over.
        self.session.reset()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _connect(self) -> BrokerConnection | None:
        if self._connection is not None and self._connection.connected:
            return self._connection
        await self._close_connection()
        leader = self.context.image.brokers.get(self.leader_id)
        if leader is None:
            return None
        connection = BrokerConnection(leader.host, leader.port, client_id=f"floe-replica-{self.context.config.broker_id}",
                                      request_timeout_s=self.context.config.get_int("request.timeout.ms") / 1000,
                                      node_id=self.leader_id, security=self.context.config.inter_broker_security)
        await connection.connect()
        self._connection = connection
        return connection

    def _log_failure(self, exc: Exception) -> None:
        """Log a failed fetch: the first of a spell of trouble at once, then at most one line every
        TROUBLE_LOG_INTERVAL_S with how many failures it stands for (a dead leader is retried every
        LEADER_RECHECK_S for a while, which logged twenty lines a second)."""
        now = asyncio.get_running_loop().time()
        self._unlogged_failures += 1
        if self._trouble_logged_at is not None and now - self._trouble_logged_at < TROUBLE_LOG_INTERVAL_S:
            return
        log.info("fetcher for leader %d: %s; retrying (%d failed attempts since the last report)", self.leader_id, exc,
                 self._unlogged_failures)
        self._trouble_logged_at = now
        self._unlogged_failures = 0

    def _leader_trouble(self, usual_wait_s: float) -> float:
        """Note that the leader cannot be reached or refused us; returns how long to wait before
        retrying: LEADER_RECHECK_S within the fast window, where the broker also re-checks the
        metadata version (shared, rate-limited), since the usual cause is a leader change this
        broker has not read yet; ``usual_wait_s`` after it."""
        now = asyncio.get_running_loop().time()
        if self._trouble_since is None:
            self._trouble_since = now
        if now - self._trouble_since > self._fast_recheck_window_s:
            return usual_wait_s
        self.context.recheck_metadata_soon(LEADER_RECHECK_S)
        return LEADER_RECHECK_S

    async def _run(self) -> None:
        while self.partitions:
            self._membership_changed.clear()
            now = asyncio.get_running_loop().time()
            for key, f in [(key, f) for key, f in self._stalled.items() if f.stalled_until <= now]:
                self._unstall(key, f)
            if len(self._stalled) == len(self.partitions):
                self._wakeup.clear()
                wake_at = min(f.stalled_until for f in self._stalled.values())
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(0.0, wake_at - now))
                except TimeoutError:
                    pass
                continue
            try:
                connection = await self._connect()
                if connection is None:
                    await asyncio.sleep(self._leader_trouble(_RETRY_BACKOFF_S))
                    continue
                truncating = [self.partitions[key] for key in self._truncating if key not in self._stalled]
                if truncating:
                    await self._truncate(connection, truncating)
                    continue
                await self._fetch(connection)
            except asyncio.CancelledError:
                raise
            except (ClientError, OSError) as exc:
                self._log_failure(exc)
                await self._close_connection()
                await asyncio.sleep(self._leader_trouble(_RETRY_BACKOFF_S))
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await self._close_connection()
                await asyncio.sleep(_RETRY_BACKOFF_S)

    def _throttles(self, partition: Partition) -> bool:
        """Whether the follower throttle holds this replica: out of the ISR, listed in its topic's
        follower.replication.throttled.replicas, and a rate set."""
        me = self.context.config.broker_id
        if self.throttle is None or me in partition.isr:
            return False
        described = self.context.image.topics.get(partition.topic)
        listed = described.configs.get(FOLLOWER_REPLICAS, "") if described is not None else ""
        return lists_replica(listed, partition.index, me) and self.throttle.limited()

    # truncation --------------------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection, followed: list[FollowedPartition]) -> None:
        """Cut each replica's log where it diverges from the leader's, then let it fetch."""
        asks = []
        for f in followed:
            latest = f.partition.log.leader_epochs.latest_epoch
            if latest is None:
                self._set_truncation(f, False)  # nothing of ours can diverge: the log holds no batches
                continue
            asks.append((f, latest))
        if not asks:
            return
        by_topic: dict[str, list[dict]] = {}
        for f, latest in asks:
            by_topic.setdefault(f.partition.topic, []).append(
                {"partition": f.partition.index, "current_leader_epoch": f.leader_epoch, "leader_epoch": latest})
        request = build_entity(
            request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION),
            {"replica_id": self.context.config.broker_id,
             "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]},
        )
        response = await connection.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, request)
        answers = {(t.topic, p.partition): p for t in response.topics for p in t.partitions}
        for f, latest in asks:
            answer = answers.get((f.partition.topic, f.partition.index))
            if answer is None or answer.error_code != ErrorCode.none:
                self._stall(f, self._leader_trouble(self._stall_s))
                continue
            log_ = f.partition.log
            if answer.end_offset < 0:
                target = f.partition.high_watermark
            elif answer.leader_epoch == latest:
                target = answer.end_offset
            else:
                _, our_end = log_.end_offset_for_epoch(answer.leader_epoch)
                target = min(answer.end_offset, our_end)
            target = min(target, log_.log_end_offset)
            if target < log_.log_end_offset:
                log.info("truncating %s-%d from %d to %d (leader %d epoch %d)", f.partition.topic, f.partition.index,
                         log_.log_end_offset, target, self.leader_id, f.leader_epoch,
                         extra={"topic": f.partition.topic, "partition": f.partition.index, "epoch": f.leader_epoch,
                                "leader": self.leader_id, "from_offset": log_.log_end_offset, "to_offset": target})
                f.partition.truncate_to(target)
            self._set_truncation(f, False)

    # fetching ----------------------------------------------------------------------------------

    async def _fetch(self, connection: BrokerConnection) -> None:
        if self._membership_changed.is_set():
            return  # a partition joined since the loop looked: truncate it first
        config = self.context.config
        # Not past the moment a stalled partition is due again: it is not in this request, and a
        # long poll would otherwise hold its retry back.
        wait_ms = config.get_int("replica.fetch.wait.max.ms")
        now = asyncio.get_running_loop().time()
        due = [f.stalled_until - now for f in self._stalled.values() if f.stalled_until > now]
        if due:
            wait_ms = min(wait_ms, int(min(due) * 1000))
        max_bytes = config.get_int("replica.fetch.max.bytes")
        throttle = self.throttle
        throttled = ({key for key, f in self.partitions.items() if key not in self._stalled and self._throttles(f.partition)}
                     if throttle is not None and throttle.limited() else set())
        throttled_max_bytes = max_bytes
        held_back: set[tuple[str, int]] = set()
        if throttled and throttle is not None:
            throttled_max_bytes = throttle.fetch_bytes(max_bytes)
            now_s = time.monotonic()
            if throttle.exceeded(now_s):
                # As Kafka's follower: replicas held to follower.replication.throttled.rate sit this fetch
                # out (the fetch session forgets them until they come back), and are back once the
                # throttle's debt is paid.
                back_in_s = min(max(throttle.wait_s(now_s), 0.001), THROTTLE_BACKOFF_S)
                if len(throttled) + len(self._stalled) == len(self.partitions):
                    await asyncio.sleep(back_in_s)
                    return
                held_back = throttled
                wait_ms = min(wait_ms, max(1, int(back_in_s * 1000)))
        if connection.version_for(ApiKey.FETCH) < FETCH_VERSION:
            raise ClientError(f"leader {self.leader_id} does not serve Fetch v{FETCH_VERSION}")
        if throttled or self._throttled or max_bytes != self._max_bytes:
            # The throttle holds replicas (or just let them go), or the size asked changed: rebuild all.
            self._changed.update(self.partitions)
        self._throttled, self._max_bytes = throttled | held_back, max_bytes
        for key in self._changed:
            f = self.partitions.get(key)
            if f is None or key in self._stalled or key in held_back:
                self.session.drop(key)
            else:
                self.session.want(key, f.fetch_position(throttled_max_bytes if key in throttled else max_bytes))
        self._changed.clear()
        session = self.session.build()
        positions: dict[str, list[FetchPosition]] = {}
        for (topic, _), position in session.to_send.items():
            positions.setdefault(topic, []).append(position)
        forgotten: dict[str, list[int]] = {}
        for topic, index in session.to_forget:
            forgotten.setdefault(topic, []).append(index)
        request = asyncio.ensure_future(connection.send_raw(
            ApiKey.FETCH, FETCH_VERSION,
            lambda correlation_id: encode_replica_fetch(
                correlation_id, connection.client_id, replica_id=config.broker_id, max_wait_ms=wait_ms, min_bytes=1,
                max_bytes=config.get_int("replica.fetch.response.max.bytes"), topics=positions,
                session_id=session.session_id, session_epoch=session.epoch, forgotten=forgotten),
            timeout_s=config.get_int("request.timeout.ms") / 1000 + config.get_int("replica.fetch.wait.max.ms") / 1000))
        changed = asyncio.ensure_future(self._membership_changed.wait())
        try:
            await asyncio.wait((request, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not request.done():
                # A partition joined or changed leader: its truncation and first fetch would wait
                # behind this long poll for up to replica.fetch.wait.max.ms, since the leader answers
                # a connection's requests in order. Give it up; the late answer must not be read as
                # the next request's, so the connection goes too.
                request.cancel()
                await self._close_connection()
        if request.cancelled():
            return
        try:
            # Parsed at once: the records are views into the connection's receive buffer.
            response = parse_fetch_response(request.result())
        except ReplicaFetchFormatError as exc:
            raise ClientError(f"unreadable Fetch response from leader {self.leader_id}: {exc}") from exc
        if not self.session.handle_response(response.error_code, response.session_id):
            # The session is gone (the leader restarted or evicted it): the next fetch is full.
            log.info("fetcher %d for leader %d: fetch session %d answered %s; starting a new one", self.fetcher_id,
                     self.leader_id, session.session_id, ErrorCode(response.error_code).name)
            return
        refused = False
        for answer in response.partitions:
            f = self.partitions.get((answer.topic, answer.partition))
            if f is None:
                continue
            if (answer.topic, answer.partition) in throttled and answer.records and self.throttle is not None:
                self.throttle.record(len(answer.records), time.monotonic())
            refused |= await self._apply(connection, f, answer)
        if not refused:
            self._trouble_since = None
            self._trouble_logged_at = None

    async def _apply(self, connection: BrokerConnection, f: FollowedPartition, answer: FetchedPartition) -> bool:
        """Take one partition's answer; True if the leader refused the partition."""
        partition = f.partition
        code = ErrorCode(answer.error_code)
        if code == ErrorCode.offset_out_of_range:
            await self._reset_out_of_range(connection, f)
            return False
        if code != ErrorCode.none:
            # Not (or no longer) the leader at our epoch: wait for the metadata to say who leads.
            log.info("%s-%d: leader %d answered %s; waiting for new metadata", partition.topic, partition.index,
                     self.leader_id, code.name,
                     extra={"topic": partition.topic, "partition": partition.index, "epoch": partition.leader_epoch,
                            "leader": self.leader_id, "error": code.name})
            self._stall(f, self._leader_trouble(self._stall_s))
            return True
        if answer.records:
            try:
                # A large append is written off the event loop (Partition.append_replicated).
                await partition.append_replicated(answer.records)
            except (LogError, RecordsError) as exc:
                log.warning("%s-%d: cannot append replicated batches: %s; re-checking divergence",
                            partition.topic, partition.index, exc)
                self._set_truncation(f, True)
                return False
            if self.partitions.get((partition.topic, partition.index)) is not f or f.leader_epoch != partition.leader_epoch:
                return False  # unfollowed or led anew while the bytes were written: the rest is stale
        if answer.log_start_offset > partition.log_start_offset:
            partition.log.delete_records_before(min(answer.log_start_offset, partition.log_end_offset))
        partition.set_high_watermark_from_leader(answer.high_watermark)
        return False

    async def _reset_out_of_range(self, connection: BrokerConnection, f: FollowedPartition) -> None:
        """Our fetch offset is outside the leader's log: cut back to its end or jump to its start."""
        partition = f.partition
        latest = await self._leader_offset(connection, f, LATEST_TIMESTAMP)
        if latest is None:
            self._stall(f, self._leader_trouble(self._stall_s))
            return
        if partition.log_end_offset > latest:
            partition.truncate_to(latest)
            return
        earliest = await self._leader_offset(connection, f, EARLIEST_TIMESTAMP)
        if earliest is not None and partition.log_end_offset < earliest:
            partition.truncate_fully_and_start_at(earliest)

    async def _leader_offset(self, connection: BrokerConnection, f: FollowedPartition, timestamp: int) -> int | None:
        response = await connection.send(ApiKey.LIST_OFFSETS, {
            "replica_id": self.context.config.broker_id, "isolation_level": 0,
            "topics": [{"name": f.partition.topic, "partitions": [
                {"partition_index": f.partition.index, "current_leader_epoch": f.leader_epoch, "timestamp": timestamp}]}],
        })
        answer = response.topics[0].partitions[0]
        return answer.offset if answer.error_code == ErrorCode.none else None


class ReplicaFetcherManager:
    """Keeps `num.replica.fetchers` fetchers per leader broker (those with partitions to follow), each
    following exactly its share of the partitions led there (`fetcher_index`)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}  # by (leader id, fetcher id)
        self._count = context.config.get_int("num.replica.fetchers")
        self._stopped = False
        config = context.config
        # One follower throttle for the broker, shared by its fetchers (broker_core.quotas.replication).
        self.throttle = ReplicationQuota(
            lambda: float(config.live(FOLLOWER_RATE, context.image.broker_configs)), time.monotonic())

    async def update(self) -> None:
        if self._stopped:
            return  # the broker is stopping; a metadata refresh must not start fetchers again
        wanted: dict[tuple[int, int], list[Partition]] = {}
        for partition in self.context.replicas.partitions.values():
            if not partition.is_leader and partition.leader_id >= 0:
                key = (partition.leader_id, fetcher_index(partition.topic, partition.index, self._count))
                wanted.setdefault(key, []).append(partition)
        for key, fetcher in list(self.fetchers.items()):
            keep = {(p.topic, p.index) for p in wanted.get(key, [])}
            for followed in list(fetcher.partitions):
                if followed not in keep:
                    fetcher.unfollow(followed)
            if not fetcher.partitions:
                await fetcher.stop()
                del self.fetchers[key]
        for key, partitions in wanted.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(self.context, *key, throttle=self.throttle)
            for partition in partitions:
                fetcher.follow(partition)

    async def stop(self) -> None:
        self._stopped = True
        while self.fetchers:
            _, fetcher = self.fetchers.popitem()
            await fetcher.stop()
