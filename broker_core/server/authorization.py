"""What a request may do: the request path's questions to the broker's `Authorizer`.

Every handler asks through `allowed` (or `cluster_allowed`, `filter_allowed`), with the request's
principal and client address as the listener stamped them. Without an authorizer
(``authorizer.class.name`` empty, the default) each answers True after one attribute test, so a
broker without security settings behaves and performs as before. A check never reads DynamoDB: the
authorizer decides from its cache.

Trusted replication (`replica_request_allowed`): a request that acts as a replica (a Fetch,
ListOffsets or OffsetForLeaderEpoch naming a replica id) is accepted only from a principal with
CLUSTER_ACTION on the cluster that is also the principal the broker named by the replica id
registered with (its inter-broker principal), so neither a client nor one broker can pose as
another broker's follower. WriteTxnMarkers, which only a transaction coordinator sends, is held to
the same rule without a broker id to check against (`broker_request_allowed`): CLUSTER_ACTION, and
the principal must be one some registered broker authenticates as.

A refusal is logged once, at INFO, with the principal and the peer address (Kafka's authorizer log
line). Checks that only filter what a response shows (Metadata's topic list, ListGroups) do not
log, as Kafka's do not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import CLUSTER_NAME, VALID_OPERATIONS, AclOperation, ResourceType
from broker_core.security.authorizer import Authorizer

if TYPE_CHECKING:
    from .context import BrokerContext

log = logging.getLogger(__name__)

_T = TypeVar("_T")
Handler = Callable[[Request], Awaitable[Any]]
_NOT_AUTHORIZED = "Authorization failed."


def allowed(authorizer: Authorizer, request: Request, operation: AclOperation, resource_type: ResourceType,
            name: str, *, log_denial: bool = True) -> bool:
    """Whether the request's principal, from its address, may perform ``operation`` on the resource."""
    if not authorizer.enabled:
        return True
    if authorizer.authorize(request.principal, request.client_host, operation, resource_type, name):
        return True
    if log_denial:
        log.info("denied: principal %s from %s may not %s %s %r (api key %d)", request.principal,
                 request.client_host, operation.name, resource_type.name, name, request.api_key)
    return False


def cluster_allowed(authorizer: Authorizer, request: Request, operation: AclOperation, *,
                    log_denial: bool = True) -> bool:
    return allowed(authorizer, request, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=log_denial)


def filter_allowed(authorizer: Authorizer, request: Request, operation: AclOperation, resource_type: ResourceType,
                   names: Iterable[_T], name_of=str) -> list[_T]:
    """The items whose resource the principal may ``operation``, silently dropping the others."""
    if not authorizer.enabled:
        return list(names)
    return [n for n in names if allowed(authorizer, request, operation, resource_type, name_of(n), log_denial=False)]


def idempotent_write_allowed(authorizer: Authorizer, request: Request) -> bool:
    """Kafka 3.x: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on some topic."""
    if not authorizer.enabled:
        return True
    if authorizer.authorize(request.principal, request.client_host, AclOperation.IDEMPOTENT_WRITE,
                            ResourceType.CLUSTER, CLUSTER_NAME):
        return True
    if authorizer.authorize_any(request.principal, request.client_host, AclOperation.WRITE, ResourceType.TOPIC):
        return True
    log.info("denied: principal %s from %s may not write idempotently (no IDEMPOTENT_WRITE on the cluster, no WRITE "
             "on any topic; api key %d)", request.principal, request.client_host, request.api_key)
    return False


def replica_request_allowed(context: BrokerContext, request: Request, replica_id: int) -> bool:
    """Whether a request naming ``replica_id`` as its sender comes from that broker (see the module doc)."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return True
    if not cluster_allowed(authorizer, request, AclOperation.CLUSTER_ACTION):
        return False
    registration = context.image.brokers.get(replica_id)
    if registration is not None and registration.principal == request.principal:
        return True
    log.warning("denied: principal %s from %s sent a replica request as broker %d, which %s (api key %d)",
                request.principal, request.client_host, replica_id,
                "is not registered" if registration is None else f"registered as {registration.principal}",
                request.api_key)
    return False


def broker_request_allowed(context: BrokerContext, request: Request) -> bool:
    """Whether a broker-only request (WriteTxnMarkers) comes from a broker: CLUSTER_ACTION on the
    cluster, from a principal that some registered broker registered with."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return True
    if not cluster_allowed(authorizer, request, AclOperation.CLUSTER_ACTION):
        return False
    if any(b.principal == request.principal for b in context.image.brokers.values()):
        return True
    log.warning("denied: principal %s from %s sent a broker-only request but no broker is registered as it "
                "(api key %d)", request.principal, request.client_host, request.api_key)
    return False


def guard_write_txn_markers(handler: Handler, context: BrokerContext) -> Handler:
    """WriteTxnMarkers behind `broker_request_allowed`: a refused request writes no marker and is
    answered CLUSTER_AUTHORIZATION_FAILED for every partition it names (Kafka's error response)."""

    async def checked(request: Request) -> Any:
        if broker_request_allowed(context, request):
            return await handler(request)
        return respond(request, {"markers": [
            {"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": ErrorCode.cluster_authorization_failed}
                                                for p in t.partition_indexes]} for t in m.topics]}
            for m in request.body.markers]})

    return checked


def scram_credentials_allowed(authorizer: Authorizer, request: Request, *, alter: bool) -> bool:
    """For the SCRAM credential APIs (Kafka's rule): DescribeUserScramCredentials (50) needs DESCRIBE on
    the cluster, AlterUserScramCredentials (51) ALTER."""
    return cluster_allowed(authorizer, request, AclOperation.ALTER if alter else AclOperation.DESCRIBE)


def guard_credential_apis(handlers: Mapping[int, Handler], authorizer: Authorizer) -> dict[int, Handler]:
    """The SCRAM credential APIs' handlers behind `scram_credentials_allowed`: a refused Describe is
    answered CLUSTER_AUTHORIZATION_FAILED, a refused Alter with that error for every user it names,
    and neither reads nor writes a credential."""
    guarded: dict[int, Handler] = {}
    for api_key, handler in handlers.items():
        alter = api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS

        async def checked(request: Request, handler: Handler = handler, alter: bool = alter) -> Any:
            if scram_credentials_allowed(authorizer, request, alter=alter):
                return await handler(request)
            if alter:
                body = request.body
                users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
                return respond(request, {"throttle_time": NO_THROTTLE, "results": [
                    {"user": user, "error_code": ErrorCode.cluster_authorization_failed,
                     "error_message": _NOT_AUTHORIZED} for user in users]})
            return respond(request, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
                                     "error_message": _NOT_AUTHORIZED, "results": []})

        guarded[api_key] = checked
    return guarded


def authorized_operations(authorizer: Authorizer, request: Request, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bitfield (Metadata, DescribeGroups): bit ``op`` is set for each
    operation the resource type has that the principal may perform; every one without an authorizer."""
    bits = 0
    for operation in VALID_OPERATIONS[resource_type]:
        if operation is not AclOperation.ALL and allowed(authorizer, request, operation, resource_type, name,
                                                         log_denial=False):
            bits |= 1 << operation
    return bits
