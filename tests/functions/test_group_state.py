"""The KIP-848-style membership rules of HTTP consumer groups, without storage."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.group_state import (
    FencedMemberEpochError,
    Group,
    GroupHasMembersError,
    StaleMemberEpochError,
    UnknownMemberError,
    assign,
    check_commit,
    expire,
    heartbeat,
    join,
    leave,
)

COUNTS = {"orders": 6, "payments": 2}
SESSION_MS = 10_000


def test_assign_balances_each_topic_and_keeps_previous_owners_where_it_can() -> None:
    first = assign({"a": ["orders"], "b": ["orders"]}, {"orders": 6}, {})
    assert sorted(len(tps) for tps in first.values()) == [3, 3]
    second = assign({"a": ["orders"], "b": ["orders"], "c": ["orders"]}, {"orders": 6}, first)
    assert sorted(len(tps) for tps in second.values()) == [2, 2, 2]
    assert second["a"] <= first["a"] and second["b"] <= first["b"]
    assert not (second["a"] & second["b"]) and not (second["c"] & (second["a"] | second["b"]))


def test_assign_gives_each_topic_only_to_its_subscribers() -> None:
    target = assign({"a": ["orders"], "b": ["payments"]}, COUNTS, {})
    assert target["a"] == {("orders", p) for p in range(6)}
    assert target["b"] == {("payments", 0), ("payments", 1)}


def test_a_new_member_gets_partitions_only_after_the_old_owner_released_them() -> None:
    group = Group("g")
    first = join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    assert len(first.assigned) == 6
    second = join(group, "b", ["orders"], SESSION_MS, 1, COUNTS)
    assert second.assigned == frozenset()  # everything is still a's
    assert second.member_epoch == group.assignment_epoch

    a = heartbeat(group, "a", first.member_epoch, None, None, 2, COUNTS)
    assert len(a.assigned) == 3 and len(a.revoking) == 3
    assert a.member_epoch < group.assignment_epoch  # it has not converged yet

    a = heartbeat(group, "a", a.member_epoch, None, None, 3, COUNTS)  # acknowledges the revocation
    assert a.revoking == frozenset() and a.member_epoch == group.assignment_epoch
    b = heartbeat(group, "b", second.member_epoch, frozenset(), None, 4, COUNTS)
    assert len(b.assigned) == 3 and not (a.assigned & b.assigned)


def test_a_member_still_owning_revoked_partitions_keeps_them_from_others() -> None:
    group = Group("g")
    a = join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    join(group, "b", ["orders"], SESSION_MS, 0, COUNTS)
    a = heartbeat(group, "a", a.member_epoch, None, None, 1, COUNTS)
    still_owned = a.assigned | a.revoking
    a = heartbeat(group, "a", a.member_epoch, still_owned, None, 2, COUNTS)
    assert len(a.revoking) == 3
    b = heartbeat(group, "b", group.members["b"].member_epoch, frozenset(), None, 3, COUNTS)
    assert b.assigned == frozenset()


def test_a_heartbeat_with_an_old_epoch_is_fenced_and_an_unknown_member_must_rejoin() -> None:
    group = Group("g")
    a = join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    join(group, "b", ["orders"], SESSION_MS, 0, COUNTS)
    heartbeat(group, "a", a.member_epoch, None, None, 1, COUNTS)
    moved = heartbeat(group, "a", a.member_epoch, None, None, 2, COUNTS)
    assert moved.member_epoch > moved.previous_epoch >= 0
    with pytest.raises(FencedMemberEpochError):
        heartbeat(group, "a", moved.previous_epoch - 1, None, None, 3, COUNTS)
    with pytest.raises(UnknownMemberError):
        heartbeat(group, "nobody", 1, None, None, 3, COUNTS)


def test_a_member_that_misses_its_session_is_removed_and_its_partitions_move() -> None:
    group = Group("g")
    join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    b = join(group, "b", ["orders"], SESSION_MS, 0, COUNTS)
    b = heartbeat(group, "b", b.member_epoch, frozenset(), None, SESSION_MS // 2, COUNTS)
    b = heartbeat(group, "b", b.member_epoch, frozenset(), None, SESSION_MS + 1, COUNTS)
    assert "a" not in group.members
    b = heartbeat(group, "b", b.member_epoch, b.assigned, None, SESSION_MS + 2, COUNTS)
    assert b.assigned == {("orders", p) for p in range(6)}


def test_leaving_frees_the_partitions_at_once() -> None:
    group = Group("g")
    a = join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    b = join(group, "b", ["orders"], SESSION_MS, 0, COUNTS)
    leave(group, "a", 1)
    b = heartbeat(group, "b", b.member_epoch, frozenset(), None, 2, COUNTS)
    assert b.assigned == {("orders", p) for p in range(6)}
    assert a.member_id not in group.members


def test_commits_need_the_current_member_epoch_or_an_empty_group() -> None:
    group = Group("g")
    check_commit(group, None, None)
    a = join(group, "a", ["orders"], SESSION_MS, 0, COUNTS)
    check_commit(group, "a", a.member_epoch)
    with pytest.raises(StaleMemberEpochError):
        check_commit(group, "a", a.member_epoch - 1)
    with pytest.raises(GroupHasMembersError):
        check_commit(group, None, None)


def test_the_group_round_trips_through_its_stored_json() -> None:
    group = Group("g")
    join(group, "a", ["orders", "payments"], SESSION_MS, 0, COUNTS)
    join(group, "b", ["orders"], SESSION_MS, 5, COUNTS)
    assert Group.from_json("g", group.to_json()) == group


operations = st.lists(
    st.tuples(st.sampled_from(["join", "heartbeat", "heartbeat-owning", "leave", "tick"]),
              st.integers(min_value=0, max_value=4), st.sampled_from([("orders",), ("payments",), ("orders", "payments")])),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_no_partition_is_ever_assigned_to_two_members(steps: list) -> None:
    group = Group("g")
    now = 0
    for kind, number, topics in steps:
        member_id = f"m{number}"
        now += 1_000
        stored = Group.from_json("g", group.to_json())
        try:
            if kind == "join" and member_id not in group.members:
                join(group, member_id, topics, SESSION_MS, now, COUNTS)
            elif kind.startswith("heartbeat") and member_id in group.members:
                member = group.members[member_id]
                owned = member.assigned | member.revoking if kind == "heartbeat-owning" else None
                heartbeat(group, member_id, member.member_epoch, owned, None, now, COUNTS)
            elif kind == "leave" and member_id in group.members:
                leave(group, member_id, now)
            elif kind == "tick":
                now += SESSION_MS // 2
        except UnknownMemberError:
            group = stored  # the member had expired; a refused request writes nothing
        held = Counter(tp for m in group.members.values() for tp in m.assigned | m.revoking)
        assert all(count == 1 for count in held.values()), held
        for member in group.members.values():
            assert member.member_epoch <= group.assignment_epoch == group.group_epoch
            assert all(topic in member.topics for topic, _ in member.assigned)
    # Members that keep heartbeating converge: each holds exactly its target at the assignment epoch.
    expire(group, now)
    for _ in range(3):
        for member in list(group.members.values()):
            heartbeat(group, member.member_id, member.member_epoch, None, None, now, COUNTS)
    for member in group.members.values():
        assert member.member_epoch == group.assignment_epoch
        assert member.assigned == group.target[member.member_id] and not member.revoking
    subscribed = {topic for m in group.members.values() for topic in m.topics}
    assert {tp for m in group.members.values() for tp in m.assigned} == {
        (topic, p) for topic in subscribed for p in range(COUNTS[topic])}
