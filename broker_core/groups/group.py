"""One consumer group as its coordinator holds it in memory: members, generation, state, offsets.

This is the classic (pre-KIP-848) group protocol's state, following Kafka's GroupMetadata: the
states Empty, PreparingRebalance, CompletingRebalance, Stable and Dead; members with the
protocols they offered, their timeouts and their assignment; static members by instance id;
members that were handed a member id (MEMBER_ID_REQUIRED) and have not joined yet; and the
committed offsets. The broker is protocol-agnostic: it selects the protocol every member supports
(by vote, like Kafka) and passes metadata and assignments through as opaque bytes.

Requests waiting for a rebalance to finish (JoinGroup, SyncGroup) park on futures held by their
member; whoever completes the phase resolves them with the fields of the response. Everything
here runs on the broker's event loop; the coordinator serialises changes that must be persisted
with ``lock``. Deadlines are readings of the loop's monotonic clock, in seconds.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.clock import wall_clock_ms

from .store import CommittedOffset, GroupRecord, StoredMember

log = logging.getLogger(__name__)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    heartbeat_deadline: float = 0.0

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def answer_join(self, response: dict[str, Any]) -> None:
        if self.awaiting_join:
            self.join_waiter.set_result(response)
        self.join_waiter = None

    def answer_sync(self, response: dict[str, Any]) -> None:
        if self.awaiting_sync:
            self.sync_waiter.set_result(response)
        self.sync_waiter = None

    def to_stored(self) -> StoredMember:
        return StoredMember(
            member_id=self.member_id, group_instance_id=self.group_instance_id, client_id=self.client_id,
            client_host=self.client_host, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, protocols=tuple(self.protocols),
            assignment=self.assignment,
        )

    @classmethod
    def from_stored(cls, stored: StoredMember, protocol_type: str | None) -> Member:
        return cls(
            member_id=stored.member_id, group_instance_id=stored.group_instance_id, client_id=stored.client_id,
            client_host=stored.client_host, session_timeout_ms=stored.session_timeout_ms,
            rebalance_timeout_ms=stored.rebalance_timeout_ms, protocol_type=protocol_type or "",
            protocols=list(stored.protocols), assignment=stored.assignment,
        )


def join_error(error: ErrorCode, member_id: str = "") -> dict[str, Any]:
    return {"error_code": error, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    coordinator_epoch: int
    lease_valid_until: float
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, float] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Offsets committed by open transactions (TxnOffsetCommit), by producer id, until their marker.
    pending_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    state_timestamp_ms: int = 0
    persisted_generation: int = 0
    rebalance_deadline: float = 0.0
    initial_join_deadline: float = 0.0
    sync_deadline: float = 0.0
    loading: bool = True
    unloaded: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    offset_locks: dict[tuple[str, int], asyncio.Lock] = field(default_factory=dict)

    # membership ---------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def prepare_rebalance(self, reason: str, now: float, initial_delay_s: float = 0.0) -> None:
        """Enter PreparingRebalance: members must join again within the largest rebalance timeout.

        A group completing a rebalance drops its pending assignment and tells the members parked in
        SyncGroup to rejoin. ``initial_delay_s`` (Kafka's ``group.initial.rebalance.delay.ms``, for a
        group that was empty) holds the join phase open for more members to arrive.
        """
        if self.is_(GroupState.COMPLETING_REBALANCE):
            for member in self.members.values():
                member.assignment = b""
                member.answer_sync(sync_error(ErrorCode.rebalance_in_progress))
        log.info("group %s: preparing rebalance at generation %d: %s", self.group_id, self.generation, reason)
        self.transition(GroupState.PREPARING_REBALANCE, wall_clock_ms())
        rebalance_s = self.max_rebalance_timeout_ms() / 1000
        self.rebalance_deadline = now + rebalance_s
        self.initial_join_deadline = now + min(initial_delay_s, rebalance_s)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member: Member, error: ErrorCode) -> None:
        """Drop a member; a request it has waiting is answered with ``error``."""
        self.members.pop(member.member_id, None)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        member.answer_join(join_error(error, member.member_id))
        member.answer_sync(sync_error(error))
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def replace_static_member(self, old: Member, new_member_id: str) -> Member:
        """Give a static member (known by instance id) a new member id; its old requests are fenced."""
        self.members.pop(old.member_id, None)
        old.answer_join(join_error(ErrorCode.fenced_instance_id, old.member_id))
        old.answer_sync(sync_error(ErrorCode.fenced_instance_id))
        new = Member(
            member_id=new_member_id, group_instance_id=old.group_instance_id, client_id=old.client_id,
            client_host=old.client_host, session_timeout_ms=old.session_timeout_ms,
            rebalance_timeout_ms=old.rebalance_timeout_ms, protocol_type=old.protocol_type,
            protocols=old.protocols, assignment=old.assignment, heartbeat_deadline=old.heartbeat_deadline,
        )
        self.members[new_member_id] = new
        self.static_members[old.group_instance_id] = new_member_id
        if self.leader_id == old.member_id:
            self.leader_id = new_member_id
        return new

    def static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A static member whose instance id is now held by another member id (KIP-345)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    # protocols ----------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocol names every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common &= set(member.protocol_names)
        return common

    def supports(self, protocol_type: str, protocol_names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(protocol_names))

    def select_protocol(self) -> str | None:
        """The candidate most members list first among the candidates (Kafka's vote)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name in member.protocol_names if name in candidates)] += 1
        order = [name for name in next(iter(self.members.values())).protocol_names if name in candidates]
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    # rebalance bookkeeping ----------------------------------------------------------------------

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def join_response(self, member: Member, leader_id: str | None = None) -> dict[str, Any]:
        """The JoinGroup answer for ``member`` in the current generation; the leader gets the members."""
        leader = self.leader_id if leader_id is None else leader_id
        members = []
        if member.member_id == leader:
            members = [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(self.protocol)}
                for m in self.members.values()
            ]
        return {"error_code": ErrorCode.none, "generation_id": self.generation, "protocol_type": self.protocol_type,
                "protocol_name": self.protocol, "leader": leader or "", "skip_assignment": False,
                "member_id": member.member_id, "members": members}

    def sync_response(self, member: Member) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "protocol_type": self.protocol_type, "protocol_name": self.protocol,
                "assignment": member.assignment}

    def answer_all(self, error: ErrorCode) -> None:
        for member in self.members.values():
            member.answer_join(join_error(error, member.member_id))
            member.answer_sync(sync_error(error))

    # persistence --------------------------------------------------------------------------------

    def to_record(self) -> GroupRecord:
        return GroupRecord(
            generation=self.generation, state=self.state.value, protocol_type=self.protocol_type,
            protocol=self.protocol, leader=self.leader_id,
            members=tuple(m.to_stored() for m in self.members.values()),
            state_timestamp_ms=self.state_timestamp_ms,
        )

    def restore(self, record: GroupRecord, now: float) -> None:
        """Take the persisted metadata as this coordinator's starting point (after a lease change)."""
        self.generation = record.generation
        self.persisted_generation = record.generation
        self.protocol_type = record.protocol_type
        self.protocol = record.protocol
        self.state_timestamp_ms = record.state_timestamp_ms
        self.members = {}
        self.static_members = {}
        for stored in record.members:
            member = Member.from_stored(stored, record.protocol_type)
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
        self.leader_id = record.leader if record.leader in self.members else next(iter(self.members), None)
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY

    @property
    def exists(self) -> bool:
        """Whether the group ever had members or offsets (a bare lease does not make a group)."""
        return bool(self.members or self.offsets or self.pending_offsets or self.protocol_type or self.generation)

    def summary(self) -> dict[str, Any]:
        """The DescribeGroups entry: member metadata and assignments only once Stable, like Kafka."""
        stable = self.is_(GroupState.STABLE)
        return {
            "error_code": ErrorCode.none, "group_id": self.group_id, "group_state": self.state.value,
            "protocol_type": self.protocol_type or "", "protocol_data": (self.protocol or "") if stable else "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host,
                 "member_metadata": m.metadata_for(self.protocol) if stable else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in self.members.values()
            ],
        }


def offset_expired(group: ConsumerGroup, committed: CommittedOffset, now_ms: int, retention_ms: int) -> bool:
    """Whether an offset of an Empty ``group`` has outlived its retention, by Kafka's rules (KIP-211).

    An offset committed with an explicit retention (OffsetCommit v2-v4) expires at its own
    timestamp. Otherwise a consumer group's offsets age from when the group became empty, and a
    standalone committer's (no protocol type: it never joined) from each commit. Groups with
    members keep their offsets; the caller only asks about Empty groups.
    """
    if committed.expire_timestamp_ms is not None:
        return now_ms >= committed.expire_timestamp_ms
    base = group.state_timestamp_ms if group.protocol_type else committed.commit_timestamp_ms
    return now_ms - max(base, 0) >= retention_ms
