"""A raw Kafka-protocol group member for the coordinator tests.

``RawMember`` speaks the group APIs with kio types over its own socket, at whichever version a test
names, so tests can drive exactly the request sequences real clients send (and the wrong ones
they must be refused for). A JoinGroup is answered only when the rebalance's join phase ends, so
tests run the joins of several members in threads.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any

from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey

SESSION_TIMEOUT_MS = 3000
# The highest version of each group API that Floe serves.
LATEST = {"find": 4, "join": 9, "sync": 5, "heartbeat": 4, "leave": 5, "commit": 8, "fetch": 7, "describe": 5,
          "list": 4, "delete": 2}
NONE, MEMBER_ID_REQUIRED, NOT_COORDINATOR, UNKNOWN_MEMBER_ID = 0, 79, 16, 25
RESTARTS_AFTER_LOST_PENDING_ID = 3
RETRY_NOT_COORDINATOR_S = 10.0


def told_not_coordinator(response: Any) -> bool:
    """NOT_COORDINATOR at the top of a response or, as OffsetCommit answers it, on every partition."""
    if getattr(response, "error_code", None) == NOT_COORDINATOR:
        return True
    codes = [p.error_code for t in getattr(response, "topics", None) or () for p in getattr(t, "partitions", ())]
    return bool(codes) and all(code == NOT_COORDINATOR for code in codes)


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


@dataclass
class RawMember:
    """One group member speaking raw protocol requests to whichever broker coordinates its group."""

    stack: LocalStack
    group_id: str
    instance_id: str | None = None
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)
    member_id: str = ""
    generation: int = -1
    versions: dict[str, int] = field(default_factory=lambda: dict(LATEST))
    _connection: BlockingConnection | None = None
    coordinator: int = -1
    _found: bool = False  # whether the connection goes to the broker FindCoordinator named

    def connect(self, broker_id: int) -> BlockingConnection:
        if self._connection is not None:
            self._connection.close()
        self._connection = BlockingConnection("127.0.0.1", self.stack.processes[broker_id].port,
                                              client_id=f"raw-{self.group_id}")
        self.coordinator = broker_id
        self._found = False
        return self._connection

    def find_coordinator(self, via: int = 1) -> Any:
        probe = BlockingConnection("127.0.0.1", self.stack.processes[via].port)
        try:
            version = self.versions["find"]
            if version >= 4:
                response = probe.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": (self.group_id,)},
                                         version)
                answer = response.coordinators[0]
            else:
                answer = probe.request(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0}, version)
        finally:
            probe.close()
        if answer.error_code == 0:
            self.connect(int(answer.node_id))
            self._found = True
        return answer

    @property
    def connection(self) -> BlockingConnection:
        if self._connection is None:
            answer = self.find_coordinator()
            assert answer.error_code == 0, answer
        assert self._connection is not None
        return self._connection

    def request(self, api: str, api_key: ApiKey, data: dict[str, Any]) -> Any:
        """Send one request; like a real client, a member that found its coordinator through
        FindCoordinator looks it up again and retries when told NOT_COORDINATOR (a coordinator whose
        lease heartbeat is late on a loaded machine stops trusting the lease for a moment)."""
        deadline = time.monotonic() + RETRY_NOT_COORDINATOR_S
        while True:
            response = self.connection.request(api_key, data, self.versions[api])
            if not (self._found and told_not_coordinator(response) and time.monotonic() < deadline):
                return response
            time.sleep(0.2)
            self.find_coordinator()

    # the group APIs ----------------------------------------------------------------------------

    def join_once(self, session_timeout_ms: int = SESSION_TIMEOUT_MS, rebalance_timeout_ms: int = 10_000) -> Any:
        response = self.request("join", ApiKey.JOIN_GROUP, {
            "group_id": self.group_id, "session_timeout": ms(session_timeout_ms),
            "rebalance_timeout": ms(rebalance_timeout_ms), "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": metadata} for name, metadata in self.protocols],
            "reason": None,
        })
        if response.error_code in (NONE, MEMBER_ID_REQUIRED):
            self.member_id = response.member_id
        if response.error_code == NONE:
            self.generation = response.generation_id
        return response

    def join(self, **kwargs: Any) -> Any:
        """JoinGroup, answering MEMBER_ID_REQUIRED by joining again with the id given.

        As Kafka's clients do, a member that is told UNKNOWN_MEMBER_ID for the id the coordinator
        just handed out forgets it and joins afresh: pending ids live only in the coordinator's
        memory, so a coordinator whose lease heartbeat ran late on a loaded machine reloads the
        group without them.
        """
        for _ in range(RESTARTS_AFTER_LOST_PENDING_ID):
            response = self.join_once(**kwargs)
            if response.error_code != MEMBER_ID_REQUIRED:
                return response
            response = self.join_once(**kwargs)
            if response.error_code != UNKNOWN_MEMBER_ID:
                return response
            self.member_id = ""
        return response

    def sync(self, assignments: dict[str, bytes] | None = None, generation: int | None = None) -> Any:
        return self.request("sync", ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": self.generation if generation is None else generation,
            "member_id": self.member_id, "group_instance_id": self.instance_id, "protocol_type": "consumer",
            "protocol_name": self.protocols[0][0],
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        })

    def heartbeat(self, generation: int | None = None, member_id: str | None = None) -> Any:
        return self.request("heartbeat", ApiKey.HEARTBEAT, {
            "group_id": self.group_id, "generation_id": self.generation if generation is None else generation,
            "member_id": self.member_id if member_id is None else member_id, "group_instance_id": self.instance_id,
        })

    def leave(self) -> Any:
        if self.versions["leave"] >= 3:
            return self.request("leave", ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "members": [
                {"member_id": self.member_id, "group_instance_id": self.instance_id, "reason": None}]})
        return self.request("leave", ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "member_id": self.member_id})

    def commit(self, offsets: dict[tuple[str, int], int], metadata: str | None = "", generation: int | None = None,
               member_id: str | None = None, retention_ms: int = -1) -> dict[tuple[str, int], int]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": metadata})
        response = self.request("commit", ApiKey.OFFSET_COMMIT, {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": self.generation if generation is None else generation,
            "member_id": self.member_id if member_id is None else member_id, "group_instance_id": self.instance_id,
            "retention_time": ms(retention_ms),
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        })
        return {(t.name, p.partition_index): int(p.error_code) for t in response.topics for p in t.partitions}

    def fetch(self, partitions: list[tuple[str, int]] | None = None) -> Any:
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": name, "partition_indexes": indexes} for name, indexes in by_topic.items()]
        return self.request("fetch", ApiKey.OFFSET_FETCH, {"group_id": self.group_id, "topics": topics, "require_stable": False})

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
