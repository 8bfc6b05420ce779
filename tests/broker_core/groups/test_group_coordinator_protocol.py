"""The classic group protocol as a coordinator must answer it, driven with raw requests on a 2-broker stack."""

from __future__ import annotations

import time

import pytest

from broker_core.groups.store import GroupStore
from broker_core.protocol.api_keys import ApiKey
from tests.broker_core.groups.raw_member import (
    MEMBER_ID_REQUIRED,
    NONE,
    RawMember,
)
from tests.support.waiting import wait_until

ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID = 22, 25, 27, 82
NOT_COORDINATOR, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT = 16, 23, 26
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE = 68, 69, 3, 12
INVALID_GROUP_ID = 24


def form_group(first: RawMember, second: RawMember, in_background) -> tuple:
    """Both members in one generation (not yet synced): the first joins alone, the second's join
    makes it rejoin. Returns both JoinGroup answers."""
    assert first.join().error_code == NONE
    assert first.sync({first.member_id: b"a"}).error_code == NONE
    second_join = in_background(second.join)
    wait_until(lambda: first.heartbeat().error_code == REBALANCE_IN_PROGRESS, "the first member told to rebalance", 15)
    first_answer = first.join()
    second_answer = second_join.result(timeout=15)
    assert first_answer.error_code == second_answer.error_code == NONE
    assert first.generation == second.generation
    return first_answer, second_answer


def settle(first: RawMember, second: RawMember, answers: tuple, in_background) -> tuple[bytes, bytes]:
    """Finish the rebalance form_group started: the leader assigns, both sync. Returns both assignments."""
    leader, follower = (first, second) if answers[0].leader == first.member_id else (second, first)
    follower_sync = in_background(follower.sync)
    leader_answer = leader.sync({leader.member_id: b"for-leader", follower.member_id: b"for-follower"})
    follower_answer = follower_sync.result(timeout=15)
    by_member = {leader.member_id: bytes(leader_answer.assignment), follower.member_id: bytes(follower_answer.assignment)}
    return by_member[first.member_id], by_member[second.member_id]


def test_join_from_v4_hands_out_a_member_id_and_asks_to_join_again_with_it(members) -> None:
    member = members()
    # Pending ids live only in the coordinator's memory: a coordinator whose lease heartbeat ran late
    # on a loaded machine reloads the group without them and answers UNKNOWN_MEMBER_ID, as Kafka's
    # does when a coordinator moves. The exchange then starts again, up to three times in all (CI
    # once failed here that way); a coordinator that never honours the id it gave fails every time.
    for _ in range(3):
        member.member_id = ""
        first = member.join_once(session_timeout_ms=30_000)
        assert first.error_code == MEMBER_ID_REQUIRED
        assert first.member_id
        second = member.join_once(session_timeout_ms=30_000)
        if second.error_code != UNKNOWN_MEMBER_ID:
            break
    assert second.error_code == NONE
    assert second.member_id == first.member_id
    assert second.generation_id == 1
    assert second.leader == second.member_id
    assert [m.member_id for m in second.members] == [second.member_id]
    assert [bytes(m.metadata) for m in second.members] == [b"meta"]


@pytest.mark.parametrize("versions", [
    {"find": 0, "join": 0, "sync": 0, "heartbeat": 0, "leave": 0, "commit": 2, "fetch": 1},
    {"find": 1, "join": 2, "sync": 1, "heartbeat": 1, "leave": 1, "commit": 3, "fetch": 2},
    {"find": 2, "join": 3, "sync": 2, "heartbeat": 2, "leave": 2, "commit": 4, "fetch": 3},
    {"find": 3, "join": 5, "sync": 3, "heartbeat": 3, "leave": 3, "commit": 6, "fetch": 5},
    {"find": 3, "join": 6, "sync": 4, "heartbeat": 4, "leave": 4, "commit": 7, "fetch": 6},
    {"find": 4, "join": 7, "sync": 5, "heartbeat": 4, "leave": 5, "commit": 8, "fetch": 7},
    {"find": 4, "join": 8, "sync": 5, "heartbeat": 4, "leave": 5, "commit": 8, "fetch": 7},
], ids=lambda v: f"join-v{v['join']}")
def test_a_member_joins_syncs_commits_and_leaves_at_every_supported_version(members, group_topic, versions) -> None:
    member = members()
    member.versions.update(versions)
    # A session long enough that no step below depends on the machine's speed: this test is about
    # every version's fields, not expiry (it failed with UNKNOWN_MEMBER_ID on a loaded machine).
    joined = member.join(session_timeout_ms=30_000)
    assert joined.error_code == NONE
    assert joined.leader == member.member_id
    assert member.sync({member.member_id: b"assigned"}).assignment == b"assigned"
    assert member.heartbeat().error_code == NONE
    assert member.commit({(group_topic, 0): 42}, metadata="m") == {(group_topic, 0): NONE}
    fetched = member.fetch([(group_topic, 0), (group_topic, 1)])
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in fetched.topics for p in t.partitions}
    assert offsets == {(group_topic, 0): (42, "m"), (group_topic, 1): (-1, "")}
    assert member.leave().error_code == NONE
    assert member.heartbeat().error_code == UNKNOWN_MEMBER_ID


def test_the_leaders_assignment_reaches_every_member(members, in_background) -> None:
    first, second = members(), members()
    answers = form_group(first, second, in_background)
    assert answers[0].leader == answers[1].leader
    leader_answer = answers[0] if answers[0].leader == first.member_id else answers[1]
    assert {m.member_id for m in leader_answer.members} == {first.member_id, second.member_id}
    assignments = settle(first, second, answers, in_background)
    assert sorted(assignments) == [b"for-follower", b"for-leader"]
    assert first.heartbeat().error_code == NONE
    assert second.heartbeat().error_code == NONE


def test_a_new_member_makes_the_others_rebalance_into_a_new_generation(members, in_background) -> None:
    first, second = members(), members()
    assert first.join().error_code == NONE
    generation = first.generation
    assert first.sync({first.member_id: b"all"}).error_code == NONE
    second_join = in_background(second.join)
    assert wait_until(lambda: first.heartbeat().error_code == REBALANCE_IN_PROGRESS,
                      "the first member told to rebalance", 15)
    assert first.sync(generation=generation).error_code == REBALANCE_IN_PROGRESS
    assert first.join().error_code == NONE
    assert second_join.result(timeout=15).error_code == NONE
    assert first.generation == second.generation == generation + 1


def test_requests_of_an_older_generation_get_illegal_generation(members, group_topic, in_background) -> None:
    first, second = members(), members()
    form_group(first, second, in_background)
    stale = first.generation - 1
    assert first.heartbeat(generation=stale).error_code == ILLEGAL_GENERATION
    assert first.sync(generation=stale).error_code == ILLEGAL_GENERATION
    assert first.commit({(group_topic, 0): 5}, generation=stale) == {(group_topic, 0): ILLEGAL_GENERATION}


def test_requests_naming_an_unknown_member_get_unknown_member_id(members, group_topic) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b""}).error_code == NONE
    assert member.heartbeat(member_id="nobody").error_code == UNKNOWN_MEMBER_ID
    assert member.commit({(group_topic, 0): 1}, member_id="nobody") == {(group_topic, 0): UNKNOWN_MEMBER_ID}
    stranger = members(group_id=member.group_id, member_id="made-up")
    assert stranger.join_once().error_code == UNKNOWN_MEMBER_ID


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(members, in_background) -> None:
    first, second = members(), members()
    settle(first, second, form_group(first, second, in_background), in_background)
    # The second member goes silent; the first keeps heartbeating until it is told to rebalance.
    assert wait_until(lambda: first.heartbeat().error_code == REBALANCE_IN_PROGRESS,
                      "the first member told to rebalance", 20)
    joined = first.join()
    assert joined.error_code == NONE
    assert [m.member_id for m in joined.members] == [first.member_id]
    assert second.heartbeat().error_code == UNKNOWN_MEMBER_ID


def test_the_protocol_every_member_supports_is_chosen(members, in_background) -> None:
    first = members(protocols=(("roundrobin", b"r"), ("range", b"x")))
    second = members(protocols=(("range", b"y"),))
    answers = form_group(first, second, in_background)
    assert [a.protocol_name for a in answers] == ["range", "range"]
    leader_answer = answers[0] if answers[0].leader == first.member_id else answers[1]
    assert {bytes(m.metadata) for m in leader_answer.members} == {b"x", b"y"}


def test_a_member_without_a_common_protocol_is_refused(members) -> None:
    first = members(protocols=(("range", b""),))
    assert first.join().error_code == NONE
    other = members(protocols=(("roundrobin", b""),))
    assert other.join().error_code == INCONSISTENT_GROUP_PROTOCOL


def test_a_session_timeout_outside_the_brokers_bounds_is_refused(members) -> None:
    assert members().join(session_timeout_ms=100).error_code == INVALID_SESSION_TIMEOUT


def test_a_static_member_that_restarts_keeps_its_generation_and_assignment(members) -> None:
    member = members(instance_id="instance-1")
    assert member.join().error_code == NONE
    generation, old_id = member.generation, member.member_id
    assert member.sync({member.member_id: b"mine"}).assignment == b"mine"
    restarted = members(group_id=member.group_id, instance_id="instance-1")
    answer = restarted.join()
    assert answer.error_code == NONE
    assert answer.generation_id == generation
    assert restarted.member_id != old_id
    assert restarted.sync().assignment == b"mine"
    # The instance id now belongs to the new member id: the old one is fenced.
    assert member.heartbeat().error_code == FENCED_INSTANCE_ID
    assert restarted.heartbeat().error_code == NONE


def test_a_dynamic_member_without_instance_id_is_never_fenced_by_a_static_one(members) -> None:
    member = members(instance_id="instance-2")
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b""}).error_code == NONE
    assert member.heartbeat(member_id="someone-else").error_code == FENCED_INSTANCE_ID


def test_offsets_round_trip_with_metadata_and_unknown_partitions_read_minus_one(members, group_topic) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b""}).error_code == NONE
    result = member.commit({(group_topic, 0): 10, (group_topic, 3): 7, ("no-such-topic", 0): 1}, metadata="meta")
    assert result == {(group_topic, 0): NONE, (group_topic, 3): NONE, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert member.commit({(group_topic, 1): 1}, metadata="x" * 5000) == {(group_topic, 1): OFFSET_METADATA_TOO_LARGE}
    everything = member.fetch(None)
    assert {(t.name, p.partition_index): p.committed_offset for t in everything.topics for p in t.partitions} == {
        (group_topic, 0): 10, (group_topic, 3): 7}
    some = member.fetch([(group_topic, 1)])
    assert some.topics[0].partitions[0].committed_offset == -1


def test_a_later_commit_replaces_an_earlier_one(members, group_topic) -> None:
    member = members()
    for offset in (5, 9, 3):
        assert member.commit({(group_topic, 2): offset}, generation=-1, member_id="") == {(group_topic, 2): NONE}
    assert member.fetch([(group_topic, 2)]).topics[0].partitions[0].committed_offset == 3


def test_only_members_commit_once_a_group_has_members(members, group_topic) -> None:
    standalone = members()
    assert standalone.commit({(group_topic, 0): 1}, generation=-1, member_id="") == {(group_topic, 0): NONE}
    member = members(group_id=standalone.group_id)
    assert member.join().error_code == NONE
    assert standalone.commit({(group_topic, 0): 2}, generation=-1, member_id="") == {
        (group_topic, 0): UNKNOWN_MEMBER_ID}
    assert member.commit({(group_topic, 0): 3}) == {(group_topic, 0): REBALANCE_IN_PROGRESS}
    assert member.sync({member.member_id: b""}).error_code == NONE
    assert member.commit({(group_topic, 0): 3}) == {(group_topic, 0): NONE}


def test_group_requests_to_a_broker_without_the_lease_get_not_coordinator(members, group_topic) -> None:
    member = members()
    assert member.find_coordinator(via=1).node_id == 1
    assert member.join().error_code == NONE
    other = members(group_id=member.group_id, member_id=member.member_id)
    other.connect(2)
    other.generation = member.generation
    assert other.heartbeat().error_code == NOT_COORDINATOR
    assert other.join_once().error_code == NOT_COORDINATOR
    assert other.commit({(group_topic, 0): 1}) == {(group_topic, 0): NOT_COORDINATOR}
    assert other.fetch(None).error_code == NOT_COORDINATOR
    # Broker 2 knows where the group lives.
    assert other.find_coordinator(via=2).node_id == 1


def test_every_broker_names_the_same_coordinator(members) -> None:
    member = members()
    member.versions["find"] = 3
    answers = {member.find_coordinator(via=broker).node_id for broker in (2, 1, 2)}
    assert len(answers) == 1


def test_an_empty_group_id_is_refused(members) -> None:
    member = members(group_id="")
    assert member.find_coordinator(via=1).error_code == INVALID_GROUP_ID


def test_list_and_describe_show_state_members_and_assignment(members) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b"bytes"}).error_code == NONE
    described = member.connection.request(ApiKey.DESCRIBE_GROUPS, {"groups": (member.group_id,),
                                                     "include_authorized_operations": False}, 5).groups[0]
    assert described.group_state == "Stable"
    assert described.protocol_type == "consumer"
    assert described.protocol_data == "range"
    assert [(m.member_id, bytes(m.member_assignment), bytes(m.member_metadata)) for m in described.members] == [
        (member.member_id, b"bytes", b"meta")]
    listed = member.connection.request(ApiKey.LIST_GROUPS, {"states_filter": ()}, 4)
    assert (member.group_id, "Stable") in {(g.group_id, g.group_state) for g in listed.groups}
    filtered = member.connection.request(ApiKey.LIST_GROUPS, {"states_filter": ("Empty",)}, 4)
    assert member.group_id not in {g.group_id for g in filtered.groups}


def test_delete_groups_refuses_a_group_with_members_and_forgets_an_empty_one(members, group_topic) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b""}).error_code == NONE
    assert member.commit({(group_topic, 0): 8}) == {(group_topic, 0): NONE}

    def delete() -> int:
        return member.connection.request(ApiKey.DELETE_GROUPS, {"groups_names": (member.group_id,)}, 2).results[0].error_code

    assert delete() == NON_EMPTY_GROUP
    assert member.leave().error_code == NONE
    assert delete() == NONE
    member.close()
    assert member.fetch([(group_topic, 0)]).topics[0].partitions[0].committed_offset == -1
    assert delete() == GROUP_ID_NOT_FOUND


def test_group_metadata_is_in_dynamodb_with_its_generation(group_stack, members) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b"stored"}).error_code == NONE
    stored = GroupStore(group_stack.aws).read_group(member.group_id)
    assert stored is not None
    assert stored.lease.holder == member.coordinator
    assert stored.record.generation == member.generation
    assert stored.record.state == "Stable"
    assert [(m.member_id, m.assignment) for m in stored.record.members] == [(member.member_id, b"stored")]


def test_offsets_committed_with_a_retention_expire_only_once_the_group_is_empty(members, group_topic) -> None:
    member = members()
    assert member.join().error_code == NONE
    assert member.sync({member.member_id: b""}).error_code == NONE
    member.versions["commit"] = 2  # the last versions with a per-commit retention time
    assert member.commit({(group_topic, 0): 4}, retention_ms=200) == {(group_topic, 0): NONE}
    time.sleep(1.0)  # several expiry checks pass while the group has a member
    assert member.heartbeat().error_code == NONE
    assert member.fetch([(group_topic, 0)]).topics[0].partitions[0].committed_offset == 4
    assert member.leave().error_code == NONE

    def expired() -> bool:
        member.close()  # once the group is forgotten its coordinator may change
        return member.fetch([(group_topic, 0)]).topics[0].partitions[0].committed_offset == -1

    wait_until(expired, "the committed offset expires once the group is empty", 15)
