"""The in-memory group: protocol selection by vote, static-member fencing, summaries, offset expiry rules."""

from __future__ import annotations

import asyncio

import pytest

from broker_core.groups.group import ConsumerGroup, GroupState, Member, offset_expired
from broker_core.groups.store import CommittedOffset

DAY_MS = 24 * 3600 * 1000


def member(member_id: str, *protocols: str, instance_id: str | None = None) -> Member:
    return Member(member_id=member_id, group_instance_id=instance_id, client_id="client", client_host="",
                  session_timeout_ms=6000, rebalance_timeout_ms=30000, protocol_type="consumer",
                  protocols=[(name, f"{member_id}:{name}".encode()) for name in protocols])


@pytest.fixture
def group() -> ConsumerGroup:
    async def make() -> ConsumerGroup:
        return ConsumerGroup(group_id="g", coordinator_epoch=1, lease_valid_until=0.0, loading=False)

    return asyncio.run(make())


def test_the_protocol_most_members_prefer_among_those_all_support_wins(group: ConsumerGroup) -> None:
    group.add(member("a", "cooperative-sticky", "range"))
    group.add(member("b", "range", "cooperative-sticky"))
    group.add(member("c", "range", "cooperative-sticky", "roundrobin"))
    assert group.candidate_protocols() == {"cooperative-sticky", "range"}
    assert group.select_protocol() == "range"


def test_a_joining_member_must_share_a_protocol_and_the_protocol_type(group: ConsumerGroup) -> None:
    assert not group.supports("consumer", [])
    assert not group.supports("", ["range"])
    group.add(member("a", "range", "roundrobin"))
    assert group.supports("consumer", ["roundrobin"])
    assert not group.supports("consumer", ["sticky"])
    assert not group.supports("connect", ["range"])


def test_a_static_instance_id_held_by_another_member_id_is_fenced(group: ConsumerGroup) -> None:
    group.add(member("a", "range", instance_id="i-1"))
    assert not group.static_member_fenced("i-1", "a")
    assert group.static_member_fenced("i-1", "b")
    assert not group.static_member_fenced(None, "b")
    replaced = group.replace_static_member(group.members["a"], "a2")
    assert group.static_member_fenced("i-1", "a")
    assert replaced.member_id == "a2" and group.leader_id == "a2"


def test_metadata_and_assignments_are_described_only_when_stable(group: ConsumerGroup) -> None:
    group.add(member("a", "range"))
    group.members["a"].assignment = b"assigned"
    group.protocol = "range"
    group.transition(GroupState.COMPLETING_REBALANCE, 1)
    described = group.summary()
    assert described["protocol_data"] == ""
    assert described["members"][0]["member_assignment"] == b""
    group.transition(GroupState.STABLE, 2)
    described = group.summary()
    assert described["protocol_data"] == "range"
    assert described["members"][0]["member_metadata"] == b"a:range"
    assert described["members"][0]["member_assignment"] == b"assigned"


def test_a_consumer_groups_offsets_age_from_when_it_became_empty(group: ConsumerGroup) -> None:
    group.protocol_type = "consumer"
    group.transition(GroupState.EMPTY, 10 * DAY_MS)
    old_commit = CommittedOffset(5, -1, "", commit_timestamp_ms=0)
    assert not offset_expired(group, old_commit, now_ms=16 * DAY_MS, retention_ms=7 * DAY_MS)
    assert offset_expired(group, old_commit, now_ms=17 * DAY_MS, retention_ms=7 * DAY_MS)


def test_a_standalone_committers_offsets_age_from_each_commit(group: ConsumerGroup) -> None:
    commit = CommittedOffset(5, -1, "", commit_timestamp_ms=3 * DAY_MS)
    assert not offset_expired(group, commit, now_ms=9 * DAY_MS, retention_ms=7 * DAY_MS)
    assert offset_expired(group, commit, now_ms=10 * DAY_MS, retention_ms=7 * DAY_MS)


def test_an_explicit_retention_from_the_commit_request_wins(group: ConsumerGroup) -> None:
    commit = CommittedOffset(5, -1, "", commit_timestamp_ms=0, expire_timestamp_ms=500)
    assert not offset_expired(group, commit, now_ms=499, retention_ms=7 * DAY_MS)
    assert offset_expired(group, commit, now_ms=500, retention_ms=7 * DAY_MS)
