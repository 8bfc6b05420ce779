"""Applying change-sequence deltas (topics created, grown, reconfigured, deleted; partition states) to a
broker's image and to the controller's snapshot: the result is what a full read would have given."""

from broker_core.metadata.image import MetadataImage
from broker_core.metadata.state import ClusterSnapshot, MetadataDelta, PartitionState, TopicDescription


def topic(name: str, topic_id: str, count: int, configs: dict[str, str] | None = None) -> TopicDescription:
    return TopicDescription(name=name, topic_id=topic_id, num_partitions=count, replication_factor=2,
                            configs=configs or {}, created_at_ms=1)


def partitions(described: TopicDescription, leader: int = 1) -> dict[tuple[str, int], PartitionState]:
    return {(described.topic_id, n): PartitionState(topic=described.name, topic_id=described.topic_id, partition=n,
                                                    replicas=(1, 2), leader=leader, leader_epoch=0, partition_epoch=0,
                                                    isr=(1, 2))
            for n in range(described.num_partitions)}


def snapshot(version: int, *described: TopicDescription) -> ClusterSnapshot:
    return ClusterSnapshot(version=version, brokers=(), topics={t.name: t for t in described},
                           partitions={t.name: tuple(partitions(t).values()) for t in described},
                           broker_configs={"<default>": {"log.retention.ms": "1"}})


def test_a_created_topic_applied_as_a_delta_matches_a_full_read():
    old, new = topic("a", "id-a", 2), topic("b", "id-b", 3)
    delta = MetadataDelta(topics={"b": new}, partitions=partitions(new))
    assert snapshot(1, old).with_delta(2, delta) == snapshot(2, old, new)
    image = MetadataImage.from_snapshot(snapshot(1, old), controller_id=3)
    applied = image.with_delta(2, delta)
    assert applied == MetadataImage.from_snapshot(snapshot(2, old, new), controller_id=3)
    assert image.keys_changed_by(delta) == {("b", 0), ("b", 1), ("b", 2)}


def test_a_deleted_and_recreated_topic_keeps_none_of_the_old_partitions():
    old, again = topic("a", "id-a", 3), topic("a", "id-a2", 1)
    delta = MetadataDelta(deleted_topic_ids=frozenset({"id-a"})).then(
        MetadataDelta(topics={"a": again}, partitions=partitions(again)))
    assert snapshot(1, old).with_delta(3, delta) == snapshot(3, again)
    image = MetadataImage.from_snapshot(snapshot(1, old))
    assert image.with_delta(3, delta) == MetadataImage.from_snapshot(snapshot(3, again))
    # The old topic's replicas are among the keys a replica manager must look at (to delete them).
    assert image.keys_changed_by(delta) == {("a", 0), ("a", 1), ("a", 2)}


def test_a_topic_created_then_deleted_within_one_delta_leaves_nothing():
    short = topic("s", "id-s", 2)
    delta = MetadataDelta(topics={"s": short}, partitions=partitions(short)).then(
        MetadataDelta(deleted_topic_ids=frozenset({"id-s"})))
    assert (delta.topics, delta.partitions) == ({}, {})
    assert snapshot(1).with_delta(3, delta) == snapshot(3)


def test_grown_and_reconfigured_topics_and_later_partition_states_win():
    before = topic("a", "id-a", 2)
    grown = topic("a", "id-a", 3, {"retention.ms": "5"})
    moved = {(s.topic_id, s.partition): s for s in partitions(grown, leader=2).values() if s.partition == 0}
    delta = MetadataDelta(topics={"a": grown}, partitions={("id-a", 2): partitions(grown)[("id-a", 2)]}).then(
        MetadataDelta(partitions=moved))
    result = snapshot(1, before).with_delta(2, delta)
    assert result.topics == {"a": grown}
    assert [(p.partition, p.leader) for p in result.partitions["a"]] == [(0, 2), (1, 1), (2, 1)]
    image = MetadataImage.from_snapshot(snapshot(1, before))
    assert image.keys_changed_by(delta) == {("a", 0), ("a", 1), ("a", 2)}  # configs reach every replica
    assert image.with_delta(2, delta).partitions[("a", 0)].leader == 2


def test_a_delta_that_does_not_fit_the_image_asks_for_a_full_read():
    held, other = topic("a", "id-a", 1), topic("a", "id-other", 1)
    assert snapshot(1, held).with_delta(2, MetadataDelta(topics={"a": other})) is None
    assert MetadataImage.from_snapshot(snapshot(1, held)).with_delta(2, MetadataDelta(topics={"a": other})) is None
    stray = partitions(topic("x", "id-x", 1))
    assert snapshot(1, held).with_delta(2, MetadataDelta(partitions=stray)) is None
    assert MetadataImage.from_snapshot(snapshot(1, held)).with_delta(2, MetadataDelta(partitions=stray)) is None


def test_an_image_read_back_as_a_snapshot_is_the_snapshot_it_was_built_from():
    described = snapshot(4, topic("a", "id-a", 2), topic("b", "id-b", 3))
    assert MetadataImage.from_snapshot(described, controller_id=2).to_snapshot() == described
