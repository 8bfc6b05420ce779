"""The segment manifest against DynamoDB (moto server): states, ordering, commit conditions."""

from __future__ import annotations

import uuid

import pytest

from broker_core.aws import AwsSettings
from tiered_storage.layout import new_segment_id
from tiered_storage.manifest import (
    InvalidSegmentError,
    ManifestStore,
    RemoteSegment,
    SegmentCommitRejectedError,
    SegmentState,
    SegmentStateError,
)

TOPIC_ID = str(uuid.uuid4())


@pytest.fixture
def manifest(aws_settings: AwsSettings) -> ManifestStore:
    store = ManifestStore(aws_settings)
    store.ensure_table()
    return store


def start(
    manifest: ManifestStore, base: int, end: int, *, leader_epoch: int = 0, partition: int = 0
) -> RemoteSegment:
    return manifest.start_copy(
        topic="events",
        topic_id=TOPIC_ID,
        partition=partition,
        segment_id=new_segment_id(),
        base_offset=base,
        end_offset=end,
        max_timestamp_ms=1_700_000_000_000 + end,
        size_bytes=1000,
        leader_epoch=leader_epoch,
        epoch_entries=[(leader_epoch, base)],
    )


def test_ensure_table_can_run_twice(manifest: ManifestStore) -> None:
    manifest.ensure_table()
    assert manifest.list_segments(TOPIC_ID, 0) == []


def test_a_started_copy_is_invisible_until_finished(manifest: ManifestStore) -> None:
    segment = start(manifest, 0, 99)
    assert manifest.list_segments(TOPIC_ID, 0) == []
    assert [s.segment_id for s in manifest.list_segments(TOPIC_ID, 0, SegmentState.COPY_STARTED)] == [
        segment.segment_id
    ]
    finished = manifest.finish_copy(segment)
    listed = manifest.list_segments(TOPIC_ID, 0)
    assert [(s.segment_id, s.state) for s in listed] == [(segment.segment_id, SegmentState.COPY_FINISHED)]
    assert listed[0].epoch_entries == ((0, 0),)
    assert listed[0].log_key == segment.log_key and listed[0].log_key.endswith(".log")
    assert finished.state is SegmentState.COPY_FINISHED
    assert manifest.partition_head(TOPIC_ID, 0).end_offset == 99


def test_segments_are_listed_by_base_offset_even_beyond_ten_digits(manifest: ManifestStore) -> None:
    for base in (0, 100, 10_000_000_000):
        manifest.finish_copy(start(manifest, base, base + 99))
    assert [s.base_offset for s in manifest.list_segments(TOPIC_ID, 0)] == [0, 100, 10_000_000_000]


def test_partitions_do_not_see_each_others_segments(manifest: ManifestStore) -> None:
    manifest.finish_copy(start(manifest, 0, 9, partition=1))
    assert manifest.list_segments(TOPIC_ID, 0) == []
    assert len(manifest.list_segments(TOPIC_ID, 1)) == 1


def test_a_second_commit_of_the_same_offsets_is_refused(manifest: ManifestStore) -> None:
    first = start(manifest, 0, 99)
    second = start(manifest, 0, 99)
    manifest.finish_copy(first)
    with pytest.raises(SegmentCommitRejectedError) as raised:
        manifest.finish_copy(second)
    assert raised.value.head_end_offset == 99
    assert [s.segment_id for s in manifest.list_segments(TOPIC_ID, 0)] == [first.segment_id]


def test_an_overlapping_segment_is_refused(manifest: ManifestStore) -> None:
    manifest.finish_copy(start(manifest, 0, 99))
    with pytest.raises(SegmentCommitRejectedError):
        manifest.finish_copy(start(manifest, 50, 149))
    manifest.finish_copy(start(manifest, 100, 149))
    assert [s.base_offset for s in manifest.list_segments(TOPIC_ID, 0)] == [0, 100]


def test_a_lower_leader_epoch_cannot_commit_after_a_higher_one(manifest: ManifestStore) -> None:
    stale = start(manifest, 100, 199, leader_epoch=3)
    manifest.finish_copy(start(manifest, 0, 99, leader_epoch=4))
    with pytest.raises(SegmentCommitRejectedError) as raised:
        manifest.finish_copy(stale)
    assert raised.value.head_leader_epoch == 4


def test_an_aborted_copy_cannot_be_finished_and_ends_as_a_deleted_row(manifest: ManifestStore) -> None:
    segment = start(manifest, 0, 99)
    aborted = manifest.abort_copy(segment)
    assert aborted.state is SegmentState.DELETE_STARTED
    with pytest.raises(SegmentStateError):
        manifest.finish_copy(segment)
    manifest.finish_delete(aborted)
    assert [s.state for s in manifest.list_segments(TOPIC_ID, 0, list(SegmentState))] == [
        SegmentState.DELETE_FINISHED
    ]
    assert manifest.partition_head(TOPIC_ID, 0) is None


def test_a_finished_copy_cannot_be_aborted(manifest: ManifestStore) -> None:
    segment = manifest.finish_copy(start(manifest, 0, 99))
    with pytest.raises(SegmentStateError):
        manifest.abort_copy(segment)
    assert [s.state for s in manifest.list_segments(TOPIC_ID, 0, list(SegmentState))] == [
        SegmentState.COPY_FINISHED
    ]


def test_deletion_goes_through_delete_started_and_delete_finished(manifest: ManifestStore) -> None:
    segment = manifest.finish_copy(start(manifest, 0, 99))
    deleting = manifest.start_delete(segment)
    assert manifest.list_segments(TOPIC_ID, 0) == []
    assert [s.state for s in manifest.list_segments(TOPIC_ID, 0, SegmentState.DELETE_STARTED)] == [
        SegmentState.DELETE_STARTED
    ]
    with pytest.raises(SegmentStateError):
        manifest.start_delete(segment)
    manifest.finish_delete(deleting)
    assert [s.state for s in manifest.list_segments(TOPIC_ID, 0, list(SegmentState))] == [
        SegmentState.DELETE_FINISHED
    ]


def test_impossible_segments_are_rejected_before_writing(manifest: ManifestStore) -> None:
    with pytest.raises(InvalidSegmentError):
        start(manifest, 10, 9)
    assert manifest.list_segments(TOPIC_ID, 0, list(SegmentState)) == []



def test_the_log_start_only_moves_up_readers_see_only_segments_reaching_it_and_commits_go_on(
    manifest: ManifestStore,
) -> None:
    topic_id = str(uuid.uuid4())

    def commit(base: int, end: int, leader_epoch: int = 0) -> None:
        row = manifest.start_copy(topic="events", topic_id=topic_id, partition=0, segment_id=new_segment_id(),
                                  base_offset=base, end_offset=end, max_timestamp_ms=end, size_bytes=1000,
                                  leader_epoch=leader_epoch, epoch_entries=[(leader_epoch, base)])
        manifest.finish_copy(row)

    # Set before any upload (DeleteRecords of records still only on disk): the first commit passes.
    assert manifest.advance_log_start(topic_id, 0, 40) == 40
    assert manifest.partition_head(topic_id, 0).end_offset == -1
    for base, end in ((0, 99), (100, 199), (200, 299)):
        commit(base, end, leader_epoch=3)
    assert manifest.remote_log(topic_id, 0).start_offset == 40
    assert manifest.advance_log_start(topic_id, 0, 150) == 150
    assert manifest.advance_log_start(topic_id, 0, 120) == 150  # lower: nothing moves
    remote = manifest.remote_log(topic_id, 0)
    assert remote.log_start_offset == 150
    assert [s.base_offset for s in remote.readable] == [100, 200]
    assert [s.base_offset for s in remote.below_log_start] == [0]
    assert remote.start_offset == 150
    head = manifest.partition_head(topic_id, 0)
    assert (head.end_offset, head.leader_epoch, head.log_start_offset) == (299, 3, 150)
    commit(300, 399, leader_epoch=3)  # the log start does not stand in the way of later commits
    assert manifest.partition_head(topic_id, 0).log_start_offset == 150
