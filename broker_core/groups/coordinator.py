"""The group coordinator: the broker service that serves the ten classic consumer-group APIs.

It joins three parts, each in its own module: `GroupOwnership` (which groups this broker
coordinates: leases in DynamoDB, loading, fencing), `GroupMembership` (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and their timers) and `GroupOffsets` (OffsetCommit, OffsetFetch, expiry).
This module serves FindCoordinator, DescribeGroups, ListGroups and DeleteGroups itself and runs the
background duties: member timers, lease heartbeats, offset expiry and, with metrics on, the lag
samples of `lag.ConsumerLag`, which reports the lag of the groups coordinated here.

Authorization, as Kafka's: JoinGroup, SyncGroup, Heartbeat and LeaveGroup need READ on the group
(else GROUP_AUTHORIZATION_FAILED, checked before anything else, so a refused member learns nothing
of the group); FindCoordinator DESCRIBE on the group or transactional id; DescribeGroups DESCRIBE
and DeleteGroups DELETE on each group; ListGroups lists every group with DESCRIBE on the cluster,
else only the groups the principal may describe. OffsetCommit and OffsetFetch are checked in
`offsets`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.server.authorization import allowed, authorized_operations, cluster_allowed
from broker_core.transactions.errors import TransactionStoreUnavailableError

from .errors import CoordinatorFencedError, GroupStoreUnavailableError
from .group import GroupState, join_error, sync_error
from .lag import ConsumerLag
from .membership import GroupMembership
from .offsets import GroupOffsets
from .ownership import GroupOwnership
from .store import NO_HOLDER

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
_REFUSED = ErrorCode.group_authorization_failed
TICK_S = 0.1


class GroupCoordinator:
    """A BrokerService: serves the group APIs and runs member timers, lease heartbeats and offset expiry.

    Requests and duties run on the broker's event loop; DynamoDB calls go to `GroupOwnership.io`'s threads.
    """

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.config = context.config
        self.broker_id = context.config.broker_id
        self.ownership = GroupOwnership(context)
        self.membership = GroupMembership(self.ownership, context.config)
        self.offsets = GroupOffsets(self.ownership, context)
        self.lag = ConsumerLag(context, self.ownership)
        context.metrics.add_collector(self.lag)
        self._tasks: list[asyncio.Task] = []
        # FindCoordinator key types other than groups', served by other coordinators (transactions).
        self._locators: dict[int, Callable[[str], Awaitable[tuple[ErrorCode, int]]]] = {}

    def add_locator(self, key_type: int, locate: Callable[[str], Awaitable[tuple[ErrorCode, int]]]) -> None:
        """Answer FindCoordinator for ``key_type`` with ``locate(key)`` -> (error, coordinator broker id)."""
        self._locators[key_type] = locate

    def api_handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[Any]]]:
        """The group APIs this service serves, for the broker's request handlers."""
        membership, offsets = self.membership, self.offsets
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self._reading_group(membership.join_group,
                                                   lambda request: join_error(_REFUSED, request.body.member_id)),
            ApiKey.SYNC_GROUP: self._reading_group(membership.sync_group, lambda _: sync_error(_REFUSED)),
            ApiKey.HEARTBEAT: self._reading_group(membership.heartbeat, lambda _: {"error_code": _REFUSED}),
            ApiKey.LEAVE_GROUP: self._reading_group(membership.leave_group,
                                                    lambda _: {"error_code": _REFUSED, "members": []}),
            ApiKey.OFFSET_COMMIT: offsets.offset_commit,
            ApiKey.OFFSET_FETCH: offsets.offset_fetch, ApiKey.TXN_OFFSET_COMMIT: offsets.txn_offset_commit,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups, ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: offsets.offset_delete,
        }

    def _reading_group(self, handler: Callable[[Request], Awaitable[Any]],
                       refusal: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Awaitable[Any]]:
        """``handler``, answered with ``refusal`` unless the principal may READ the request's group."""
        async def guarded(request: Request) -> Any:
            if allowed(self.context.authorizer, request, AclOperation.READ, ResourceType.GROUP, request.body.group_id):
                return await handler(request)
            response = refusal(request)
            if request.api_key == ApiKey.JOIN_GROUP and response.get("protocol_name") is None:
                response["protocol_name"] = "" if request.api_version < 7 else None
            return respond(request, {"throttle_time": NO_THROTTLE, **response})

        return guarded

    async def start(self) -> None:
        await self.ownership.start()
        self._tasks = [
            asyncio.create_task(self._every(TICK_S, self.membership.tick), name="group-timers"),
            asyncio.create_task(self._every(self.ownership.lease_duration_ms / 3000, self.ownership.heartbeat_leases),
                                name="group-lease-heartbeat"),
            asyncio.create_task(self._every(self.config.get_int("offsets.retention.check.interval.ms") / 1000,
                                            self.offsets.expire_offsets), name="group-offset-expiry"),
        ]
        if self.context.metrics.enabled:
            self._tasks.append(asyncio.create_task(
                self._every(self.config.get_int("floe.consumer.lag.sample.ms") / 1000, self.lag.sample),
                name="group-lag-samples"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.lag.close()
        await self.ownership.stop()

    async def _every(self, interval_s: float, duty: Callable[[], Any]) -> None:
        while True:
            try:
                await duty()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", duty.__name__)
            await asyncio.sleep(interval_s)

    async def find_coordinator(self, request: Request) -> Any:
        body = request.body
        key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
        keys = list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]
        answers = []
        for key in keys:
            answer = {"key": key, "error_code": ErrorCode.none, "error_message": None, "node_id": -1,
                      "host": "", "port": -1}
            answers.append(answer)
            if key_type in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
                resource = ResourceType.GROUP if key_type == GROUP_KEY_TYPE else ResourceType.TRANSACTIONAL_ID
                if not allowed(self.context.authorizer, request, AclOperation.DESCRIBE, resource, key):
                    answer["error_code"] = (_REFUSED if key_type == GROUP_KEY_TYPE
                                            else ErrorCode.transactional_id_authorization_failed)
                    continue
            locate = self.ownership.locate if key_type == GROUP_KEY_TYPE else self._locators.get(key_type)
            if locate is None:
                answer["error_code"] = ErrorCode.invalid_request
                answer["error_message"] = f"unknown coordinator key type {key_type}"
                continue
            if not key:
                answer["error_code"] = ErrorCode.invalid_group_id if key_type == GROUP_KEY_TYPE else ErrorCode.invalid_request
                continue
            try:
                error, node = await locate(key)
            except (GroupStoreUnavailableError, TransactionStoreUnavailableError) as exc:
                log.warning("FindCoordinator %s: %s", key, exc)
                error, node = ErrorCode.coordinator_not_available, -1
            answer["error_code"] = error
            if error == ErrorCode.none:
                if node == self.broker_id:
                    answer["host"], answer["port"] = self.context.advertised_endpoint(request.listener_name)
                else:
                    registration = self.context.image.brokers[node]
                    answer["host"], answer["port"] = registration.endpoint(request.listener_name)
                answer["node_id"] = node
        first = answers[0]
        return respond(request, {"throttle_time": NO_THROTTLE, "coordinators": answers, **first})

    async def describe_groups(self, request: Request) -> Any:
        described = []
        for group_id in request.body.groups:
            if not allowed(self.context.authorizer, request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                described.append({"error_code": _REFUSED, "group_id": group_id, "group_state": "",
                                  "protocol_type": "", "protocol_data": "", "members": []})
                continue
            group, error = self.ownership.owned(group_id)
            if group is None:
                described.append({"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "",
                                  "protocol_data": "", "members": []})
            elif not group.exists:
                described.append({"error_code": ErrorCode.none, "group_id": group_id,
                                  "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
                                  "members": []})
            else:
                described.append(group.summary())
            if getattr(request.body, "include_authorized_operations", False):
                described[-1]["authorized_operations"] = authorized_operations(
                    self.context.authorizer, request, ResourceType.GROUP, group_id)
        return respond(request, {"throttle_time": NO_THROTTLE, "groups": described})

    async def list_groups(self, request: Request) -> Any:
        wanted = {s.lower() for s in getattr(request.body, "states_filter", ()) or ()}
        listed: dict[str, dict[str, Any]] = {}
        for group in list(self.ownership.groups.values()):
            if not group.loading and group.exists:
                listed[group.group_id] = {"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                                          "group_state": group.state.value}
        error = ErrorCode.none
        live = sorted(b.broker_id for b in self.context.image.live_brokers())
        if live and live[0] == self.broker_id:
            # Groups whose coordinator is gone are nobody's until a client looks for them; the
            # lowest-numbered live broker lists them so that no group drops out of the listing.
            try:
                stored = await self.ownership.io(self.ownership.store.list_groups)
            except GroupStoreUnavailableError as exc:
                log.warning("ListGroups: %s", exc)
                stored = []
                error = ErrorCode.coordinator_not_available
            for item in stored:
                orphan = item.lease.holder == NO_HOLDER or item.lease.holder not in live
                if orphan and item.group_id not in listed and (item.record.protocol_type or item.record.generation):
                    listed[item.group_id] = {"group_id": item.group_id,
                                             "protocol_type": item.record.protocol_type or "",
                                             "group_state": item.record.state}
        groups = [g for g in listed.values() if not wanted or g["group_state"].lower() in wanted]
        authorizer = self.context.authorizer
        if authorizer.enabled and not cluster_allowed(authorizer, request, AclOperation.DESCRIBE, log_denial=False):
            groups = [g for g in groups if allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.GROUP,
                                                   g["group_id"], log_denial=False)]
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error, "groups": groups})

    async def delete_groups(self, request: Request) -> Any:
        results = []
        for group_id in request.body.groups_names:
            if not allowed(self.context.authorizer, request, AclOperation.DELETE, ResourceType.GROUP, group_id):
                results.append({"group_id": group_id, "error_code": _REFUSED})
                continue
            results.append({"group_id": group_id, "error_code": await self._delete_group(group_id)})
        return respond(request, {"throttle_time": NO_THROTTLE, "results": results})

    async def _delete_group(self, group_id: str) -> ErrorCode:
        group, error = self.ownership.owned(group_id)
        if group is None:
            return error
        async with group.lock:
            if group.unloaded:
                return ErrorCode.not_coordinator
            if group.members or not group.is_(GroupState.EMPTY):
                return ErrorCode.non_empty_group
            existed = group.exists
            try:
                await self.offsets.remove_offsets(group, list(group.offsets))
                await self.ownership.io(self.ownership.store.delete_group, group_id, self.broker_id, group.coordinator_epoch)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                return await self.ownership.lost(group, exc)
            self.ownership.unload(group)
        return ErrorCode.none if existed else ErrorCode.group_id_not_found
