"""Consumer-group membership for stateless HTTP clients, in the style of KIP-848 (sans-I/O).

The server owns the assignment; clients only join, heartbeat and leave. Three epochs order
everything, as in KIP-848:

- the **group epoch** goes up whenever what the assignment depends on changes: a member joins,
  leaves, expires or changes its subscription, or a subscribed topic's partition count changes;
- the **assignment epoch** is the group epoch the current target assignment was computed for
  (`assign`: balanced per topic, keeping as many of each member's previous partitions as its share
  allows);
- each member's **member epoch** says which target it has converged to.

A member moves to a new target in two steps. First it is told to give up the partitions the new
target takes from it (they move from ``assigned`` to ``revoking``; its epoch stays). Once it has
acknowledged (a heartbeat whose ``owned`` no longer lists them, or any heartbeat without
``owned``: having heartbeated, it applied the answer before), its epoch becomes the assignment
epoch and it receives the target partitions no other member still holds; the rest arrive on later
heartbeats as their previous owners release them. So no partition is ever assigned to two members.
A heartbeat must carry the member's current epoch (or the one before, in case the answer that
raised it was lost); anything else is fenced and the member must join again. An offset commit must
carry the current epoch. Members that miss their session timeout are removed by whichever request
next touches the group (wall-clock times written by the front ends; only the epochs, checked by
conditional writes, carry correctness).

Thread-safety: plain data; `Group` is mutated in place by one request at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

MAX_HEARTBEAT_INTERVAL_MS = 5_000


class GroupStateError(Exception):
    """A membership request the group's state refuses."""


class UnknownMemberError(GroupStateError):
    def __init__(self, group_id: str, member_id: str) -> None:
        super().__init__(f"group {group_id!r} has no member {member_id!r}: join again")
        self.group_id = group_id
        self.member_id = member_id


class FencedMemberEpochError(GroupStateError):
    def __init__(self, group_id: str, member_id: str, given: int, current: int) -> None:
        super().__init__(f"member {member_id!r} of group {group_id!r} sent epoch {given}, but its epoch is {current}: "
                         "it is fenced and must join again")
        self.member_epoch = current


class StaleMemberEpochError(GroupStateError):
    def __init__(self, group_id: str, member_id: str, given: int, current: int) -> None:
        super().__init__(f"member {member_id!r} of group {group_id!r} committed with epoch {given}, but its epoch is "
                         f"{current}: heartbeat first")
        self.member_epoch = current


class GroupHasMembersError(GroupStateError):
    def __init__(self, group_id: str) -> None:
        super().__init__(f"group {group_id!r} has members: commit with a member_id and member_epoch")


@dataclass
class Member:
    member_id: str
    member_epoch: int
    previous_epoch: int
    topics: tuple[str, ...]
    session_timeout_ms: int
    last_seen_ms: int
    assigned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()

    @property
    def heartbeat_interval_ms(self) -> int:
        return min(MAX_HEARTBEAT_INTERVAL_MS, self.session_timeout_ms // 3)


@dataclass
class Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)

    @property
    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.topics}

    def to_json(self) -> str:
        return json.dumps({
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "partition_counts": self.partition_counts,
            "target": {m: sorted(tps) for m, tps in self.target.items()},
            "members": [
                {"member_id": m.member_id, "member_epoch": m.member_epoch, "previous_epoch": m.previous_epoch,
                 "topics": list(m.topics), "session_timeout_ms": m.session_timeout_ms,
                 "last_seen_ms": m.last_seen_ms, "assigned": sorted(m.assigned), "revoking": sorted(m.revoking)}
                for m in self.members.values()
            ],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, group_id: str, text: str) -> Group:
        data = json.loads(text)

        def partitions(items: Iterable[list]) -> frozenset[TopicPartition]:
            return frozenset((str(topic), int(partition)) for topic, partition in items)

        members = {}
        for m in data["members"]:
            members[m["member_id"]] = Member(
                member_id=m["member_id"], member_epoch=m["member_epoch"], previous_epoch=m["previous_epoch"],
                topics=tuple(m["topics"]), session_timeout_ms=m["session_timeout_ms"], last_seen_ms=m["last_seen_ms"],
                assigned=partitions(m["assigned"]), revoking=partitions(m["revoking"]))
        return cls(group_id=group_id, group_epoch=data["group_epoch"], assignment_epoch=data["assignment_epoch"],
                   members=members, target={m: partitions(tps) for m, tps in data["target"].items()},
                   partition_counts={t: int(n) for t, n in data["partition_counts"].items()})


def assign(subscriptions: Mapping[str, Iterable[str]], partition_counts: Mapping[str, int],
           previous: Mapping[str, frozenset[TopicPartition]]) -> dict[str, frozenset[TopicPartition]]:
    """A balanced, sticky assignment: each topic's partitions spread over its subscribers so that
    counts differ by at most one, each member keeping as many of its ``previous`` partitions as
    its share allows. Deterministic for the same inputs."""
    result: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    topics = sorted({topic for topics in subscriptions.values() for topic in topics})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        subscribers = sorted(member for member, wanted in subscriptions.items() if topic in wanted)
        if count <= 0 or not subscribers:
            continue
        kept = {m: sorted(p for t, p in previous.get(m, ()) if t == topic and p < count) for m in subscribers}
        # Members that held the most get the larger shares first: fewer partitions move.
        order = sorted(subscribers, key=lambda m: (-len(kept[m]), m))
        base, extra = divmod(count, len(order))
        quota = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(order)}
        taken: set[int] = set()
        share: dict[str, list[int]] = {}
        for member in order:
            share[member] = [p for p in kept[member] if p not in taken][:quota[member]]
            taken.update(share[member])
        free = iter(p for p in range(count) if p not in taken)
        for member in order:
            while len(share[member]) < quota[member]:
                share[member].append(next(free))
            result[member].update((topic, p) for p in share[member])
    return {member: frozenset(tps) for member, tps in result.items()}


def _refresh_target(group: Group, partition_counts: Mapping[str, int]) -> None:
    counts = {topic: partition_counts.get(topic, 0) for topic in sorted(group.subscribed_topics)}
    if counts != group.partition_counts:
        group.partition_counts = counts
        group.group_epoch += 1
    if group.assignment_epoch != group.group_epoch:
        group.target = assign({m.member_id: m.topics for m in group.members.values()}, counts, group.target)
        group.assignment_epoch = group.group_epoch


def _reconcile(group: Group, member: Member) -> None:
    target = group.target.get(member.member_id, frozenset())
    to_revoke = member.assigned - target
    if to_revoke:
        member.assigned -= to_revoke
        member.revoking |= to_revoke
        return
    if member.revoking:
        return
    if member.member_epoch != group.assignment_epoch:
        member.previous_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
    held_elsewhere: set[TopicPartition] = set()
    for other in group.members.values():
        if other.member_id != member.member_id:
            held_elsewhere |= other.assigned | other.revoking
    member.assigned |= frozenset(tp for tp in target - member.assigned if tp not in held_elsewhere)


def expire(group: Group, now_ms: int) -> list[str]:
    """Remove members whose session ran out; their ids."""
    gone = [m.member_id for m in group.members.values() if now_ms - m.last_seen_ms > m.session_timeout_ms]
    for member_id in gone:
        _remove(group, member_id)
    return gone


def _remove(group: Group, member_id: str) -> None:
    del group.members[member_id]
    group.target.pop(member_id, None)
    group.group_epoch += 1


def join(group: Group, member_id: str, topics: Iterable[str], session_timeout_ms: int, now_ms: int,
         partition_counts: Mapping[str, int]) -> Member:
    """Add a member (epoch 0) and give it what it can have of the new target at once."""
    expire(group, now_ms)
    member = Member(member_id=member_id, member_epoch=0, previous_epoch=0, topics=tuple(sorted(set(topics))),
                    session_timeout_ms=session_timeout_ms, last_seen_ms=now_ms)
    group.members[member_id] = member
    group.group_epoch += 1
    _refresh_target(group, partition_counts)
    _reconcile(group, member)
    return member


def _member(group: Group, member_id: str) -> Member:
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberError(group.group_id, member_id)
    return member


def heartbeat(group: Group, member_id: str, member_epoch: int, owned: frozenset[TopicPartition] | None,
              topics: Iterable[str] | None, now_ms: int, partition_counts: Mapping[str, int]) -> Member:
    """Record the member alive, take its acknowledgement of revoked partitions, and move it on."""
    expire(group, now_ms)
    member = _member(group, member_id)
    if member_epoch not in (member.member_epoch, member.previous_epoch):
        raise FencedMemberEpochError(group.group_id, member_id, member_epoch, member.member_epoch)
    member.last_seen_ms = now_ms
    member.revoking = frozenset() if owned is None else member.revoking & owned
    if topics is not None:
        wanted = tuple(sorted(set(topics)))
        if wanted != member.topics:
            member.topics = wanted
            group.group_epoch += 1
    _refresh_target(group, partition_counts)
    _reconcile(group, member)
    return member


def leave(group: Group, member_id: str, now_ms: int) -> None:
    """Remove a member; its partitions are free at once."""
    expire(group, now_ms)
    _member(group, member_id)
    _remove(group, member_id)
    _refresh_target(group, group.partition_counts)


def check_commit(group: Group, member_id: str | None, member_epoch: int | None) -> None:
    """Raise unless an offset commit with this member and epoch is allowed now."""
    if member_id is None:
        if group.members:
            raise GroupHasMembersError(group.group_id)
        return
    member = _member(group, member_id)
    if member_epoch != member.member_epoch:
        raise StaleMemberEpochError(group.group_id, member_id, member_epoch if member_epoch is not None else -1,
                                    member.member_epoch)
