"""A broker restarting with logs it no longer hosts: they are renamed to ``-delete`` at once, never
opened or served, removed after file.delete.delay.ms, and a topic re-created under the same name
starts empty. Unit tests: a ReplicaManager over a temporary data directory and a hand-made image."""

from __future__ import annotations

from pathlib import Path

from broker_core.aws import AwsSettings
from broker_core.log.log_directories import LogDeletions, is_deleted_directory, partition_of_directory
from broker_core.metadata.image import MetadataImage
from broker_core.metadata.state import PartitionState, TopicDescription
from broker_core.records import build_batch, iter_batches
from broker_core.records.batch import SimpleRecord
from broker_core.server.config import BrokerConfig
from broker_core.server.replica_manager import ReplicaManager

ME = 1
# A topic on other brokers: the cluster still has topics when this broker's are gone.
ELSEWHERE = ("elsewhere", "id-elsewhere", (2,))


def config(data_dir: Path, delay_ms: int = 60_000) -> BrokerConfig:
    return BrokerConfig(broker_id=ME, host="127.0.0.1", port=0, data_dir=data_dir,
                        aws=AwsSettings(None, "us-east-1", "bucket", "prefix-"),
                        overrides={"log.segment.delete.delay.ms": str(delay_ms)})


def image(*topics: tuple[str, str, tuple[int, ...]]) -> MetadataImage:
    """An image of one-partition topics: (name, topic id, replicas), led by the first replica."""
    result = MetadataImage(version=1)
    for name, topic_id, replicas in topics:
        description = TopicDescription(name, topic_id, 1, len(replicas), {}, 0)
        result.topics[name] = description
        result.topics_by_id[topic_id] = description
        result.partitions[(name, 0)] = PartitionState(name, topic_id, 0, replicas, replicas[0], 0, 0, replicas)
    return result


def write_records(manager: ReplicaManager, topic: str, values: list[bytes]) -> None:
    partition = manager.get(topic, 0)
    assert partition is not None
    partition.log.append(build_batch([SimpleRecord(value=value) for value in values]), leader_epoch=0)


def read_values(manager: ReplicaManager, topic: str) -> list[bytes]:
    partition = manager.get(topic, 0)
    assert partition is not None
    data = partition.log.read_bytes(0, 1 << 20)
    return [record.value for batch in iter_batches(data) for record in batch.records]


def restart(data_dir: Path, metadata: MetadataImage, delay_ms: int = 60_000) -> tuple[ReplicaManager, list[Path]]:
    """What Broker.start does with the data directory: apply the first image, then remove stray logs."""
    manager = ReplicaManager(config(data_dir, delay_ms))
    manager.apply(metadata)
    return manager, manager.remove_stray_logs(metadata)


def test_logs_of_a_deleted_topic_and_of_a_replica_moved_away_are_renamed_for_deletion(tmp_path: Path) -> None:
    manager = ReplicaManager(config(tmp_path))
    manager.apply(image(("kept", "id-kept", (ME, 2)), ("deleted", "id-deleted", (ME,)), ("moved", "id-moved", (ME, 2))))
    for topic in ("kept", "deleted", "moved"):
        write_records(manager, topic, [topic.encode()])
    manager.close()

    # While the broker was down: "deleted" was deleted, "moved" reassigned to brokers 2 and 3.
    manager, renamed = restart(tmp_path, image(("kept", "id-kept", (ME, 2)), ("moved", "id-moved", (2, 3))))
    try:
        assert sorted(partition_of_directory(p.name.rsplit(".", 1)[0]) for p in renamed) == [
            ("deleted", 0), ("moved", 0)]
        assert all(is_deleted_directory(p.name) and p.is_dir() for p in renamed)
        assert sorted(p.name for p in tmp_path.iterdir() if not is_deleted_directory(p.name)) == ["kept-0"]
        assert set(manager.partitions) == {("kept", 0)}
        assert read_values(manager, "kept") == [b"kept"]
        assert manager.deletions.pending == renamed
    finally:
        manager.close()


def test_a_renamed_log_is_removed_only_after_the_delay(tmp_path: Path) -> None:
    now = [100.0]
    deletions = LogDeletions(60_000, clock=lambda: now[0])
    (tmp_path / "gone-0").mkdir()
    renamed = deletions.schedule(tmp_path / "gone-0")
    now[0] += 59.9
    assert deletions.due() == []
    now[0] += 0.2
    assert deletions.due() == [renamed]
    assert deletions.pending == []
    assert deletions.schedule(tmp_path / "never-there-0") is None  # nothing to delete, nothing pending
    assert deletions.pending == []


def test_leftover_delete_directories_of_an_earlier_run_are_scheduled_again(tmp_path: Path) -> None:
    first, _ = restart(tmp_path, image(("deleted", "id-deleted", (ME,))), delay_ms=0)
    write_records(first, "deleted", [b"old"])
    first.close()
    second, renamed = restart(tmp_path, image(ELSEWHERE), delay_ms=0)
    second.close()
    # Stopped before removing it: the next start finds the -delete directory and removes it in turn.
    third, again = restart(tmp_path, image(ELSEWHERE), delay_ms=0)
    assert again == []
    assert third.deletions.pending == renamed
    assert third.deletions.due() == renamed


def test_a_topic_recreated_under_the_same_name_does_not_get_the_old_records_back(tmp_path: Path) -> None:
    manager, _ = restart(tmp_path, image(("events", "id-old", (ME,))))
    write_records(manager, "events", [b"old 1", b"old 2"])
    manager.close()
    # Deleted while this broker was down; the broker comes back before it is created again.
    manager, renamed = restart(tmp_path, image(ELSEWHERE))
    manager.close()
    assert len(renamed) == 1
    manager, _ = restart(tmp_path, image(("events", "id-new", (ME,))))
    try:
        assert read_values(manager, "events") == []
        write_records(manager, "events", [b"new"])
        assert read_values(manager, "events") == [b"new"]
    finally:
        manager.close()


def test_a_partition_assigned_here_whose_topic_is_not_described_yet_is_kept(tmp_path: Path) -> None:
    manager, _ = restart(tmp_path, image(("slow", "id-slow", (ME,))))
    write_records(manager, "slow", [b"x"])
    manager.close()
    partial = image(("slow", "id-slow", (ME,)))
    del partial.topics["slow"]
    manager, renamed = restart(tmp_path, partial)
    manager.close()
    assert renamed == []
    assert (tmp_path / "slow-0").is_dir()


def test_names_that_are_not_partition_directories_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("operator's")
    (tmp_path / "lost+found").mkdir()
    (tmp_path / "backup").mkdir()
    manager, renamed = restart(tmp_path, image(ELSEWHERE))
    manager.close()
    assert renamed == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "lost+found", "notes.txt"]


def test_with_no_topic_at_all_in_the_metadata_nothing_is_removed(tmp_path: Path) -> None:
    manager, _ = restart(tmp_path, image(("events", "id-events", (ME,))))
    manager.close()
    # A wrong table prefix looks like this: the broker alone, no topic.
    manager, renamed = restart(tmp_path, image())
    manager.close()
    assert renamed == []
    assert (tmp_path / "events-0").is_dir()


def test_a_new_replica_at_its_first_leader_epoch_records_it_when_opened_and_its_first_appends_keep_it(
        tmp_path: Path) -> None:
    manager = ReplicaManager(config(tmp_path))
    metadata = image(("fresh", "id-fresh", (ME, 2)), ("follower", "id-follower", (2, ME)))
    manager.apply(metadata, opened=manager.open_missing(metadata))
    for topic in ("fresh", "follower"):
        log = manager.get(topic, 0).log
        assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(0, 0)]
    write_records(manager, "fresh", [b"a", b"b"])
    follower = manager.get("follower", 0).log
    follower.append_as_follower(build_batch([SimpleRecord(value=b"c")], partition_leader_epoch=0))
    assert [(e.epoch, e.start_offset) for e in manager.get("fresh", 0).log.leader_epochs.entries] == [(0, 0)]
    assert [(e.epoch, e.start_offset) for e in follower.leader_epochs.entries] == [(0, 0)]
    manager.close()
    # Reopened, the logs recover with the same epochs (the cache is read back, or rebuilt from the batches).
    again = ReplicaManager(config(tmp_path))
    again.apply(metadata)
    assert read_values(again, "fresh") == [b"a", b"b"]
    assert [(e.epoch, e.start_offset) for e in again.get("fresh", 0).log.leader_epochs.entries] == [(0, 0)]
    again.close()
