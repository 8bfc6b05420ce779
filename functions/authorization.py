"""ACL checks on the HTTP front end: the same ACLs and the same rules as the Kafka listener.

The caller's principal (`functions.caller`, ``User:<IAM ARN>``) and source address are checked with
`broker_core.security.authorizer.Authorizer` (StandardAuthorizer semantics: super users, deny wins,
no matching ACL denies unless ``allow.everyone.if.no.acl.found``) against the ``acls`` table the
brokers read (`broker_core.security.acl_store`). What each route needs is what Kafka checks for the
request it stands for:

    POST /v1/topics/{t}/records            WRITE topic t                  (Produce)
    GET  /v1/topics/{t}/partitions/../records   READ topic t              (Fetch)
    POST /v1/topics                        CREATE cluster or CREATE topic (CreateTopics)
    GET  /v1/topics                        lists only topics DESCRIBE allows (Metadata)
    GET  /v1/topics/{t}                    DESCRIBE topic t               (Metadata, DescribeConfigs)
    DELETE /v1/topics/{t}                  DELETE topic t                 (DeleteTopics)
    POST/DELETE /v1/groups/{g}/members..   READ group g                   (JoinGroup, Heartbeat, LeaveGroup)
    GET  /v1/groups/{g}                    DESCRIBE group g               (DescribeGroups)
    POST /v1/groups/{g}/offsets            READ group g and READ each topic (OffsetCommit)
    GET  /v1/groups/{g}/offsets            DESCRIBE group g; topics not DESCRIBE-able left out (OffsetFetch)

A refusal is 403 with the JSON problem body and Kafka's error name (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED); it is logged once per request with the
caller and source address.

Configured as the brokers are, with Kafka's names, from the environment: FLOE_AUTHORIZER_CLASS_NAME
(``authorizer.class.name``; empty, the default, means no authorization), FLOE_SUPER_USERS
(``super.users``, ``;``-separated principals) and FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND. A container
re-reads the ACLs every ``ACLS_TTL_S`` (one consistent Scan), so a change holds on the API within
that time. A read that fails keeps the ACLs the container had; a container that never read them
answers 503 rather than decide without them.
"""

from __future__ import annotations

import math
import os
import time
from http import HTTPStatus

from broker_core.aws import AwsSettings
from broker_core.security.acl_store import AclStore, AclStoreError
from broker_core.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from broker_core.security.authorizer import Authorizer
from functions.errors import ApiError, hidden
from functions.telemetry import logger

ACLS_TTL_S = 5.0
# Environment variable -> the Kafka setting it carries.
ENVIRONMENT_SETTINGS = {
    "FLOE_AUTHORIZER_CLASS_NAME": "authorizer.class.name",
    "FLOE_SUPER_USERS": "super.users",
    "FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "allow.everyone.if.no.acl.found",
}
_ERROR_NAMES = {
    ResourceType.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    ResourceType.GROUP: "GROUP_AUTHORIZATION_FAILED",
    ResourceType.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED",
}
CLUSTER_RESOURCE = CLUSTER_NAME


def authorizer_from_env() -> Authorizer:
    """The Authorizer the environment configures (disabled unless FLOE_AUTHORIZER_CLASS_NAME is set)."""
    overrides = {setting: os.environ[name] for name, setting in ENVIRONMENT_SETTINGS.items() if name in os.environ}
    return Authorizer.from_settings(overrides)


class HttpAuthorizer:
    """One container's authorizer and the ACLs it caches (see the module doc)."""

    def __init__(self, settings: AwsSettings, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self.store = AclStore(settings) if authorizer.enabled else None
        self._loaded_at = -math.inf
        self._ever_loaded = False

    def _refresh(self) -> None:
        if self.store is None:
            return
        now = time.monotonic()
        if now - self._loaded_at < ACLS_TTL_S:
            return
        try:
            self.authorizer.replace_acls(self.store.load())
        except AclStoreError as error:
            if not self._ever_loaded:
                raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "authorization is unavailable; retry later", error) from error
            logger.warning("ACLs were not reloaded (the previous ones stay in force)", extra={"error": str(error)})
        else:
            self._ever_loaded = True
        self._loaded_at = now

    def allows(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               name: str) -> bool:
        if not self.authorizer.enabled:
            return True
        self._refresh()
        return self.authorizer.authorize(principal, host, operation, resource_type, name)

    def require(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> None:
        """ApiError 403 unless ``principal`` from ``host`` may perform ``operation`` on the resource."""
        if not self.allows(principal, host, operation, resource_type, name):
            raise refusal(principal, host, operation, resource_type, name)


def refusal(principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str) -> ApiError:
    logger.warning("request refused by ACLs", extra={"principal": principal, "source_ip": host,
                                                     "operation": operation.name, "resource_type": resource_type.name,
                                                     "resource_name": name})
    what = "the cluster" if resource_type is ResourceType.CLUSTER else f"{resource_type.name.lower()} {name!r}"
    return ApiError(HTTPStatus.FORBIDDEN, f"not authorized to {operation.name} {what}",
                    kafka_error=_ERROR_NAMES[resource_type])
