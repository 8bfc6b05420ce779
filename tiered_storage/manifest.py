"""The segment manifest: DynamoDB's record of which segments of a partition live in S3, and in what state.

Readers of tiered data (the broker's remote reads, Lambda front ends, Spark) never list S3: they
query this table and range-GET the object keys it names (DESIGN.md decision 6). One DynamoDB table,
``<table prefix>segments``, holds two kinds of items under the hash key ``partition_key`` =
``"<topic id>:<partition>"`` (keyed by topic id, not name, so a re-created topic never sees the
segments of its predecessor):

- **Segment rows**, range key ``"segment#<20-digit base offset>#<segment id>"`` (so a query returns
  them in base-offset order): ``topic``, ``topic_id``, ``partition``, ``segment_id`` (UUID, one per
  upload attempt), ``base_offset``, ``end_offset`` (last offset in the segment, inclusive),
  ``max_timestamp_ms`` (-1 when no batch carries a timestamp), ``size_bytes`` (of the .log object),
  ``leader_epoch`` (epoch of the leader that uploaded it: its fencing token), ``epoch_entries``
  (the leader-epoch entries ``[epoch, start offset]`` of the segment's batches, first one at or
  below ``base_offset``), ``state``, ``log_key`` and ``indexes_key`` (S3 keys, see
  ``tiered_storage.layout``), ``created_at_ms``, ``updated_at_ms`` and, once DELETE_FINISHED,
  ``expires_at`` (a DynamoDB TTL that reclaims the tombstone; nothing depends on it firing).
- **One head item per partition**, range key ``"head"``: ``end_offset`` (the largest end offset
  ever committed COPY_FINISHED, -1 before the first), ``leader_epoch`` (the largest leader epoch
  that committed a segment) and ``log_start_offset`` (absent until a DeleteRecords moved it: the
  partition's log start, below which no reader may return a record; it only ever grows).

Life of a segment row (KIP-405's states)::

    COPY_STARTED --finish_copy--> COPY_FINISHED --start_delete--> DELETE_STARTED --finish_delete--> DELETE_FINISHED
         |                                                         ^
         +--abort_copy---------------------------------------------+

``start_copy`` writes the row before any byte is uploaded, so an object in S3 always has a row that
names it: a crash between upload and commit leaves a COPY_STARTED row, which the next uploader run
treats as an orphan. Objects are deleted only while their row is DELETE_STARTED (``abort_copy`` for
an upload that never committed, ``start_delete`` for retention), so no upload can commit a row
whose objects are going, and a crash during deletion leaves a DELETE_STARTED row to finish later. ``finish_copy`` is one DynamoDB
transaction over the row (condition: still COPY_STARTED) and the head item (condition: no head yet,
or head ``end_offset`` < this segment's ``base_offset`` and head ``leader_epoch`` <= the uploader's
epoch). Hence the invariant readers rely on: **the COPY_FINISHED segments of a partition never
overlap**; sorted by base offset, each starts after the previous one ends (gaps appear only where
the local log had none of the data when tiering was enabled), and an uploader whose leadership was
taken over by a higher epoch cannot commit. There is never a second COPY_FINISHED row for the same
offsets: a retried or concurrent commit of the same offsets fails its head condition.

DeleteRecords on a tiered partition moves the log start here first (`advance_log_start`), so every
reader (the brokers, the Lambda front ends, Spark) sees it, and then on the leader's disk. Readers
take `RemoteLog.readable` segments and start no earlier than ``log_start_offset``; remote retention
deletes the segments wholly below it (`RemoteLog.below_log_start`) like any it condemns.

Thread-safety: a ManifestStore holds no mutable state of its own and may be shared by threads. It
is synchronous (pynamodb): the broker calls it through ``asyncio.to_thread``, never on the event
loop. DynamoDB failures that no condition explains surface as ManifestUnavailableError; transaction
conflicts and throttling are retried with jittered backoff.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pynamodb.attributes import (
    ListAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
)
from pynamodb.connection import Connection
from pynamodb.exceptions import (
    PutError,
    UpdateError,
)
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.clock import wall_clock_ms
from broker_core.dynamodb_tables import (
    CONDITION_FAILED,
    bind_model,
    condition_failed,
    ensure_tables,
    failures_as,
    share_connection,
    transact,
)
from tiered_storage.layout import segment_object_keys

SEGMENTS_TABLE = "segments"
HEAD_RANGE_KEY = "head"
SEGMENT_RANGE_KEY_PREFIX = "segment#"
DELETE_FINISHED_RETENTION_S = 7 * 24 * 3600



class SegmentState(enum.StrEnum):
    """KIP-405's states of a remote segment."""

    COPY_STARTED = "COPY_STARTED"
    COPY_FINISHED = "COPY_FINISHED"
    DELETE_STARTED = "DELETE_STARTED"
    DELETE_FINISHED = "DELETE_FINISHED"


class ManifestError(Exception):
    """Base class of every manifest error."""


class ManifestUnavailableError(ManifestError):
    """DynamoDB could not be reached or failed in a way no condition explains."""


class SegmentStateError(ManifestError):
    """A transition found the row in another state than the one it starts from (or gone)."""

    def __init__(self, segment: RemoteSegment, expected: SegmentState) -> None:
        super().__init__(
            f"segment {segment.segment_id} of {segment.topic}-{segment.partition} "
            f"[{segment.base_offset}, {segment.end_offset}] is no longer {expected.value}"
        )
        self.segment = segment
        self.expected = expected


class SegmentCommitRejectedError(ManifestError):
    """finish_copy lost to the head item: the offsets are already tiered, or a higher leader epoch committed.

    ``head_end_offset`` and ``head_leader_epoch`` are the head item's values when the commit was
    refused (None when it could not be read back).
    """

    def __init__(
        self, segment: RemoteSegment, head_end_offset: int | None, head_leader_epoch: int | None
    ) -> None:
        super().__init__(
            f"commit of segment {segment.segment_id} of {segment.topic}-{segment.partition} "
            f"[{segment.base_offset}, {segment.end_offset}] at leader epoch {segment.leader_epoch} refused: "
            f"remote end offset is {head_end_offset}, latest committing leader epoch {head_leader_epoch}"
        )
        self.segment = segment
        self.head_end_offset = head_end_offset
        self.head_leader_epoch = head_leader_epoch


class InvalidSegmentError(ManifestError, ValueError):
    """start_copy was given offsets, sizes or epochs that cannot describe a segment."""


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One manifest row: a segment copied (or being copied, or deleted) to S3."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_bytes: int
    leader_epoch: int
    epoch_entries: tuple[tuple[int, int], ...]
    state: SegmentState
    log_key: str
    indexes_key: str
    created_at_ms: int
    updated_at_ms: int

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1

    def contains(self, offset: int) -> bool:
        return self.base_offset <= offset <= self.end_offset


@dataclass(frozen=True, slots=True)
class PartitionHead:
    """The head item of a partition: how far its COPY_FINISHED segments reach, who committed last,
    and the log start DeleteRecords set (0 when it never did)."""

    end_offset: int
    leader_epoch: int
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class RemoteLog:
    """A partition's remote log as readers see it: its COPY_FINISHED segments by base offset and its
    log start (the head's ``log_start_offset``, 0 when DeleteRecords never moved it)."""

    segments: tuple[RemoteSegment, ...]
    log_start_offset: int

    @property
    def readable(self) -> list[RemoteSegment]:
        """The segments holding an offset at or above the log start (the first may begin below it)."""
        return [segment for segment in self.segments if segment.end_offset >= self.log_start_offset]

    @property
    def below_log_start(self) -> list[RemoteSegment]:
        """The segments wholly below the log start, oldest first: nothing may read them; retention deletes them."""
        return [segment for segment in self.segments if segment.end_offset < self.log_start_offset]

    @property
    def start_offset(self) -> int | None:
        """The first offset a reader may get from S3 (None when no readable segment is left)."""
        readable = self.readable
        return max(readable[0].base_offset, self.log_start_offset) if readable else None


class SegmentItem(Model):
    partition_key = UnicodeAttribute(hash_key=True)
    segment_key = UnicodeAttribute(range_key=True)
    topic = UnicodeAttribute()
    topic_id = UnicodeAttribute()
    partition = NumberAttribute()
    segment_id = UnicodeAttribute()
    base_offset = NumberAttribute()
    end_offset = NumberAttribute()
    max_timestamp_ms = NumberAttribute()
    size_bytes = NumberAttribute()
    leader_epoch = NumberAttribute()
    epoch_entries = ListAttribute(of=NumberAttribute, default=list)
    state = UnicodeAttribute()
    log_key = UnicodeAttribute()
    indexes_key = UnicodeAttribute()
    created_at_ms = NumberAttribute()
    updated_at_ms = NumberAttribute()
    expires_at = TTLAttribute(null=True)


class PartitionHeadItem(Model):
    partition_key = UnicodeAttribute(hash_key=True)
    segment_key = UnicodeAttribute(range_key=True)
    end_offset = NumberAttribute()
    leader_epoch = NumberAttribute()
    log_start_offset = NumberAttribute(null=True)


@dataclass(frozen=True)
class BoundManifestModels:
    """The manifest models bound to one table prefix, region and endpoint, sharing one connection."""

    segment: type[SegmentItem]
    head: type[PartitionHeadItem]
    connection: Connection


def bind_manifest_models(settings: AwsSettings) -> BoundManifestModels:
    """Subclasses of the manifest models whose Meta points at ``settings``' segments table, one client."""
    segment = bind_model(SegmentItem, settings, SEGMENTS_TABLE)
    head = bind_model(PartitionHeadItem, settings, SEGMENTS_TABLE)
    return BoundManifestModels(segment=segment, head=head, connection=share_connection((segment, head), settings))


def partition_key(topic_id: str, partition: int) -> str:
    return f"{topic_id}:{partition}"


def segment_range_key(base_offset: int, segment_id: str) -> str:
    return f"{SEGMENT_RANGE_KEY_PREFIX}{base_offset:020d}#{segment_id}"


_errors_as_unavailable = failures_as(ManifestUnavailableError, ManifestError)


def _flatten_epochs(entries: Iterable[tuple[int, int]]) -> list[int]:
    return [number for entry in entries for number in entry]


def _segment_from_item(item: SegmentItem) -> RemoteSegment:
    flat = [int(n) for n in item.epoch_entries or []]
    return RemoteSegment(
        topic=item.topic,
        topic_id=item.topic_id,
        partition=int(item.partition),
        segment_id=item.segment_id,
        base_offset=int(item.base_offset),
        end_offset=int(item.end_offset),
        max_timestamp_ms=int(item.max_timestamp_ms),
        size_bytes=int(item.size_bytes),
        leader_epoch=int(item.leader_epoch),
        epoch_entries=tuple(zip(flat[0::2], flat[1::2], strict=True)),
        state=SegmentState(item.state),
        log_key=item.log_key,
        indexes_key=item.indexes_key,
        created_at_ms=int(item.created_at_ms),
        updated_at_ms=int(item.updated_at_ms),
    )


class ManifestStore:
    """The segment manifest of a cluster, in the DynamoDB table ``settings.table_prefix + "segments"``.

    Role: the only writer and reader of segment rows and partition heads; the one source readers
    (remote reads, the front ends, Spark) use to find tiered data, instead of listing S3.
    Invariants (module docstring): every S3 object has a row naming it; objects are deleted only
    while their row is DELETE_STARTED; the COPY_FINISHED rows of a partition never overlap, and a
    commit from a leader epoch older than the head's is refused. Callers: the partition leader's
    uploader and remote retention write (``start_copy``, ``finish_copy``, ``abort_copy``,
    ``start_delete``, ``finish_delete``), anyone may read. Every method blocks on DynamoDB: call it
    from a worker thread (``asyncio.to_thread``), never on the event loop; the store keeps no state.
    """

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models = bind_manifest_models(settings)

    @property
    def table_name(self) -> str:
        return self.models.segment.Meta.table_name

    # -- table -------------------------------------------------------------------------------

    @_errors_as_unavailable
    def ensure_table(self) -> None:
        """Create the table if missing (on-demand), wait until ACTIVE and turn on TTL for tombstones.

        Safe to call from several processes at once.
        """
        model = self.models.segment
        ensure_tables([model], ManifestUnavailableError)
        # TTL only reclaims DELETE_FINISHED tombstones; a backend without TTL costs storage, not correctness.
        model.update_ttl(ignore_update_ttl_errors=True)

    # -- copy --------------------------------------------------------------------------------

    @_errors_as_unavailable
    def start_copy(
        self,
        *,
        topic: str,
        topic_id: str,
        partition: int,
        segment_id: str,
        base_offset: int,
        end_offset: int,
        max_timestamp_ms: int,
        size_bytes: int,
        leader_epoch: int,
        epoch_entries: Sequence[tuple[int, int]],
    ) -> RemoteSegment:
        """Write the COPY_STARTED row of a segment about to be uploaded; return it (with its object keys).

        Raises InvalidSegmentError for impossible values and SegmentStateError if a row with this
        segment id and base offset already exists.
        """
        if base_offset < 0 or end_offset < base_offset:
            raise InvalidSegmentError(f"offsets [{base_offset}, {end_offset}] do not describe a segment")
        if size_bytes <= 0 or leader_epoch < 0 or max_timestamp_ms < -1:
            raise InvalidSegmentError(
                f"size {size_bytes}, leader epoch {leader_epoch}, max timestamp {max_timestamp_ms} out of range"
            )
        entries = tuple((int(epoch), int(start)) for epoch, start in epoch_entries)
        for previous, entry in zip(entries, entries[1:], strict=False):
            if entry[0] <= previous[0] or entry[1] <= previous[1]:
                raise InvalidSegmentError(f"leader-epoch entries {entries} are not increasing")
        keys = segment_object_keys(topic, topic_id, partition, base_offset, segment_id)
        now = wall_clock_ms()
        segment = RemoteSegment(
            topic=topic,
            topic_id=topic_id,
            partition=partition,
            segment_id=segment_id,
            base_offset=base_offset,
            end_offset=end_offset,
            max_timestamp_ms=max_timestamp_ms,
            size_bytes=size_bytes,
            leader_epoch=leader_epoch,
            epoch_entries=entries,
            state=SegmentState.COPY_STARTED,
            log_key=keys.log,
            indexes_key=keys.indexes,
            created_at_ms=now,
            updated_at_ms=now,
        )
        item = self.models.segment(
            partition_key(topic_id, partition),
            segment_range_key(base_offset, segment_id),
            topic=topic,
            topic_id=topic_id,
            partition=partition,
            segment_id=segment_id,
            base_offset=base_offset,
            end_offset=end_offset,
            max_timestamp_ms=max_timestamp_ms,
            size_bytes=size_bytes,
            leader_epoch=leader_epoch,
            epoch_entries=_flatten_epochs(entries),
            state=SegmentState.COPY_STARTED.value,
            log_key=keys.log,
            indexes_key=keys.indexes,
            created_at_ms=now,
            updated_at_ms=now,
        )
        try:
            item.save(condition=self.models.segment.segment_key.does_not_exist())
        except PutError as err:
            if condition_failed(err):
                raise SegmentStateError(segment, SegmentState.COPY_STARTED) from err
            raise
        return segment

    @_errors_as_unavailable
    def finish_copy(self, segment: RemoteSegment) -> RemoteSegment:
        """Commit an uploaded segment: COPY_STARTED -> COPY_FINISHED and advance the partition head.

        Raises SegmentStateError if the row is no longer COPY_STARTED (an orphan cleanup removed it)
        and SegmentCommitRejectedError if its offsets are already covered or a higher leader epoch
        has committed; in both cases nothing was written.
        """
        models = self.models
        now = wall_clock_ms()
        key = partition_key(segment.topic_id, segment.partition)
        head = models.head(key, HEAD_RANGE_KEY)

        def build(transaction: TransactWrite) -> None:
            transaction.update(
                models.segment(key, segment_range_key(segment.base_offset, segment.segment_id)),
                actions=[
                    models.segment.state.set(SegmentState.COPY_FINISHED.value),
                    models.segment.updated_at_ms.set(now),
                ],
                condition=models.segment.state == SegmentState.COPY_STARTED.value,
            )
            transaction.update(
                head,
                actions=[
                    models.head.end_offset.set(segment.end_offset),
                    models.head.leader_epoch.set(segment.leader_epoch),
                ],
                condition=models.head.partition_key.does_not_exist()
                | (
                    (models.head.end_offset < segment.base_offset)
                    & (models.head.leader_epoch <= segment.leader_epoch)
                ),
            )

        codes = self._transact(build)
        if codes is not None:
            if codes[0] == CONDITION_FAILED:
                raise SegmentStateError(segment, SegmentState.COPY_STARTED)
            current = self.partition_head(segment.topic_id, segment.partition)
            raise SegmentCommitRejectedError(
                segment,
                None if current is None else current.end_offset,
                None if current is None else current.leader_epoch,
            )
        return _replace_state(segment, SegmentState.COPY_FINISHED, now)

    @_errors_as_unavailable
    def abort_copy(self, segment: RemoteSegment) -> RemoteSegment:
        """COPY_STARTED -> DELETE_STARTED: fence an upload that failed or was orphaned by a crash.

        Call it *before* deleting the segment's objects: once the row has left COPY_STARTED no
        uploader can commit it, so objects are never deleted under a committed row. The caller then
        deletes the objects and calls `finish_delete`. Raises SegmentStateError if the row is in
        another state (for instance because an ambiguous `finish_copy` did commit) or gone.
        """
        return self._transition(segment, SegmentState.COPY_STARTED, SegmentState.DELETE_STARTED)

    # -- delete ------------------------------------------------------------------------------

    @_errors_as_unavailable
    def start_delete(self, segment: RemoteSegment) -> RemoteSegment:
        """COPY_FINISHED -> DELETE_STARTED: readers stop seeing the segment before its objects go."""
        return self._transition(segment, SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED)

    @_errors_as_unavailable
    def finish_delete(self, segment: RemoteSegment) -> RemoteSegment:
        """DELETE_STARTED -> DELETE_FINISHED, after the objects were deleted; the row becomes a tombstone."""
        return self._transition(segment, SegmentState.DELETE_STARTED, SegmentState.DELETE_FINISHED)

    def _transition(
        self, segment: RemoteSegment, source: SegmentState, target: SegmentState
    ) -> RemoteSegment:
        model = self.models.segment
        now = wall_clock_ms()
        item = model(
            partition_key(segment.topic_id, segment.partition),
            segment_range_key(segment.base_offset, segment.segment_id),
        )
        actions = [model.state.set(target.value), model.updated_at_ms.set(now)]
        if target is SegmentState.DELETE_FINISHED:
            actions.append(model.expires_at.set(timedelta(seconds=DELETE_FINISHED_RETENTION_S)))
        try:
            item.update(actions=actions, condition=model.state == source.value)
        except UpdateError as err:
            if condition_failed(err):
                raise SegmentStateError(segment, source) from err
            raise
        return _replace_state(segment, target, now)

    # -- reads -------------------------------------------------------------------------------

    @_errors_as_unavailable
    def list_segments(
        self,
        topic_id: str,
        partition: int,
        states: SegmentState | Iterable[SegmentState] = SegmentState.COPY_FINISHED,
    ) -> list[RemoteSegment]:
        """The partition's segment rows in ``states``, by increasing base offset (one consistent query).

        With the default (COPY_FINISHED) the result is the partition's readable remote log: the
        segments do not overlap and each starts after the previous one's end offset.
        """
        wanted = [states.value] if isinstance(states, SegmentState) else [s.value for s in states]
        model = self.models.segment
        items = model.query(
            partition_key(topic_id, partition),
            model.segment_key.startswith(SEGMENT_RANGE_KEY_PREFIX),
            filter_condition=model.state.is_in(*wanted),
            consistent_read=True,
        )
        return [_segment_from_item(item) for item in items]

    @_errors_as_unavailable
    def partition_head(self, topic_id: str, partition: int) -> PartitionHead | None:
        """The partition's head item, None before its first committed segment."""
        try:
            item = self.models.head.get(
                partition_key(topic_id, partition), HEAD_RANGE_KEY, consistent_read=True
            )
        except self.models.head.DoesNotExist:
            return None
        return PartitionHead(end_offset=int(item.end_offset), leader_epoch=int(item.leader_epoch),
                             log_start_offset=int(item.log_start_offset or 0))

    @_errors_as_unavailable
    def remote_log(self, topic_id: str, partition: int) -> RemoteLog:
        """The partition's COPY_FINISHED segments and its log start (head first, so a log start read is
        never newer than the segments: a segment deleted meanwhile is only missing, never wrongly readable)."""
        head = self.partition_head(topic_id, partition)
        segments = self.list_segments(topic_id, partition)
        return RemoteLog(tuple(segments), 0 if head is None else head.log_start_offset)

    @_errors_as_unavailable
    def advance_log_start(self, topic_id: str, partition: int, offset: int) -> int:
        """DeleteRecords: raise the partition's log start to ``offset`` unless it is already higher; return it.

        A conditional update of the head item, so concurrent calls leave the largest offset; a head
        created here gets end offset -1 and leader epoch -1, which any first commit passes.
        """
        if offset < 0:
            raise ValueError(f"a log start cannot be negative ({offset})")
        model = self.models.head
        item = model(partition_key(topic_id, partition), HEAD_RANGE_KEY)
        try:
            item.update(
                actions=[
                    model.log_start_offset.set(offset),
                    model.end_offset.set(model.end_offset | -1),
                    model.leader_epoch.set(model.leader_epoch | -1),
                ],
                condition=model.log_start_offset.does_not_exist() | (model.log_start_offset < offset),
            )
        except UpdateError as err:
            if not condition_failed(err):
                raise
            head = self.partition_head(topic_id, partition)
            return offset if head is None else max(head.log_start_offset, offset)
        return offset

    def _transact(self, build: Callable[[TransactWrite], None]) -> list[str | None] | None:
        return transact(
            self.models.connection,
            build,
            lambda attempts: ManifestUnavailableError(f"transaction still conflicting after {attempts} attempts"),
        )


def _replace_state(segment: RemoteSegment, state: SegmentState, now_ms: int) -> RemoteSegment:
    fields = {name: getattr(segment, name) for name in RemoteSegment.__slots__}
    fields.update(state=state, updated_at_ms=now_ms)
    return RemoteSegment(**fields)
