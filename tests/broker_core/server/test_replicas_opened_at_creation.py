"""The replicas of a topic just created, as a ReplicaManager opens them: three file-system entries each,
their first leader epoch in memory, and one log line for the pass. Unit tests over a temporary data
directory and a hand-made image."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker_core.aws import AwsSettings
from broker_core.log.leader_epoch import EpochEntry
from broker_core.metadata.image import MetadataImage
from broker_core.metadata.state import PartitionState, TopicDescription
from broker_core.server.config import BrokerConfig
from broker_core.server.replica_manager import ReplicaManager

ME = 1
TOPIC, TOPIC_ID = "created", "id-created"


def topic_image(partitions: int, *, leader_epoch: int = 0) -> MetadataImage:
    """One topic whose partitions alternate between led here and led by broker 2 (replicas 1 and 2)."""
    image = MetadataImage(version=1)
    description = TopicDescription(TOPIC, TOPIC_ID, partitions, 2, {}, 0)
    image.topics[TOPIC] = description
    image.topics_by_id[TOPIC_ID] = description
    for index in range(partitions):
        replicas = (ME, 2) if index % 2 == 0 else (2, ME)
        image.partitions[(TOPIC, index)] = PartitionState(TOPIC, TOPIC_ID, index, replicas, replicas[0],
                                                          leader_epoch, 0, replicas)
    return image


def manager_for(data_dir: Path) -> ReplicaManager:
    return ReplicaManager(BrokerConfig(broker_id=ME, host="127.0.0.1", port=0, data_dir=data_dir,
                                       aws=AwsSettings(None, "us-east-1", "bucket", "prefix-")))


@pytest.fixture(autouse=True)
def no_fsyncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing 40 logs is some 240 fsyncs, seconds on a busy disk; what is written is what these tests check."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def test_a_created_topics_replicas_are_opened_with_three_entries_each_and_logged_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = manager_for(tmp_path)
    image = topic_image(40)  # above PARALLEL_OPEN_MIN: opened by the threads
    caplog.set_level(logging.INFO)
    manager.apply(image, opened=manager.open_missing(image))
    assert len(manager.partitions) == 40
    assert {tuple(sorted(p.name for p in d.iterdir())) for d in tmp_path.iterdir()} == {
        ("00000000000000000000.log", "partition.metadata")}
    assert all(p.log.leader_epochs.entries == (EpochEntry(0, 0),) for p in manager.partitions.values())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [f"opened 40 replicas: leader of 20 partitions [{TOPIC}-0, {TOPIC}-2, {TOPIC}-4, {TOPIC}-6, "
                     f"{TOPIC}-8, {TOPIC}-10, {TOPIC}-12, {TOPIC}-14, {TOPIC}-16, {TOPIC}-18, ...], follower of 20 "
                     f"partitions [{TOPIC}-1, {TOPIC}-3, {TOPIC}-5, {TOPIC}-7, {TOPIC}-9, {TOPIC}-11, {TOPIC}-13, "
                     f"{TOPIC}-15, {TOPIC}-17, {TOPIC}-19, ...]"]

    # A leader change of replicas already open is still logged one line per partition.
    caplog.clear()
    moved = topic_image(40, leader_epoch=1)
    moved.partitions[(TOPIC, 1)] = PartitionState(TOPIC, TOPIC_ID, 1, (2, ME), ME, 1, 1, (2, ME))
    manager.apply(moved, changed=[(TOPIC, 1)])
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        f"{TOPIC}-1: leader at epoch 1 from offset 0, ISR [2, 1]"]
    manager.close()
    # Closing flushed every log, and with it the epoch each held in memory.
    assert (tmp_path / f"{TOPIC}-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"


def test_a_few_replicas_opened_are_named_in_the_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = manager_for(tmp_path)
    caplog.set_level(logging.INFO)
    manager.apply(topic_image(2))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        f"opened 2 replicas: leader of [{TOPIC}-0], follower of [{TOPIC}-1]"]
    manager.close()
