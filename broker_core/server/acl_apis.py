"""DescribeAcls (API 29), CreateAcls (30) and DeleteAcls (31): managing the ACLs over the Kafka protocol.

As Kafka answers them: without an authorizer every answer is SECURITY_DISABLED; describing needs
DESCRIBE on the cluster and creating or deleting needs ALTER on it, else CLUSTER_AUTHORIZATION_FAILED;
a binding or filter Kafka would refuse is that entry's INVALID_REQUEST and the other entries proceed.
Descriptions are read from DynamoDB (so a change made through any broker shows at once); after a
change the metadata version is bumped, so every broker decides by it within one metadata poll. A
store that cannot be reached is REQUEST_TIMED_OUT (the client may retry; creation is idempotent).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metadata import errors as meta_errors
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acl_store import AclStoreError
from broker_core.security.acls import AclBinding, AclBindingFilter, AclError, AclOperation, binding_from_codes

from .authorization import cluster_allowed

if TYPE_CHECKING:
    from broker_core.security.acl_service import AclService

    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

_SECURITY_DISABLED = "No Authorizer is configured on the broker"
_NOT_AUTHORIZED = "The principal may not {} ACLs (needs {} on the cluster)"


class AclApis:
    """The three ACL APIs of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext, acls: AclService) -> None:
        self.context = context
        self.acls = acls

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.DESCRIBE_ACLS: self.describe_acls, ApiKey.CREATE_ACLS: self.create_acls,
                ApiKey.DELETE_ACLS: self.delete_acls}

    def _refusal(self, request: Request, operation: AclOperation, verb: str) -> tuple[ErrorCode, str] | None:
        """Why the whole request is refused, or None when it may proceed."""
        if not self.context.authorizer.enabled:
            return ErrorCode.security_disabled, _SECURITY_DISABLED
        if not cluster_allowed(self.context.authorizer, request, operation):
            return ErrorCode.cluster_authorization_failed, _NOT_AUTHORIZED.format(verb, operation.name)
        return None

    async def describe_acls(self, request: Request) -> Any:
        body = request.body
        response = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None, "resources": []}
        refusal = self._refusal(request, AclOperation.DESCRIBE, "describe")
        if refusal is not None:
            response["error_code"], response["error_message"] = refusal
            return respond(request, response)
        try:
            acl_filter = AclBindingFilter.from_codes(
                body.resource_type_filter, body.resource_name_filter, getattr(body, "pattern_type_filter", 3),
                body.principal_filter, body.host_filter, body.operation, body.permission_type)
        except AclError as exc:
            response["error_code"], response["error_message"] = ErrorCode.invalid_request, str(exc)
            return respond(request, response)
        try:
            stored = await asyncio.to_thread(self.acls.store.load)
        except AclStoreError as exc:
            response["error_code"], response["error_message"] = ErrorCode.request_timed_out, str(exc)
            return respond(request, response)
        by_resource: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
        for binding in stored:
            if acl_filter.matches(binding):
                key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
                by_resource[key].append(binding)
        response["resources"] = [
            {"resource_type": resource_type, "resource_name": name, "pattern_type": pattern_type,
             "acls": [{"principal": b.principal, "host": b.host, "operation": int(b.operation),
                       "permission_type": int(b.permission)}
                      for b in sorted(bindings, key=lambda b: (b.principal, b.host, b.operation, b.permission))]}
            for (resource_type, name, pattern_type), bindings in sorted(by_resource.items())
        ]
        return respond(request, response)

    async def create_acls(self, request: Request) -> Any:
        creations = request.body.creations
        refusal = self._refusal(request, AclOperation.ALTER, "create")
        if refusal is not None:
            results = [{"error_code": refusal[0], "error_message": refusal[1]} for _ in creations]
            return respond(request, {"throttle_time": NO_THROTTLE, "results": results})
        results = []
        changed = False
        for creation in creations:
            result = {"error_code": ErrorCode.none, "error_message": None}
            results.append(result)
            try:
                binding = binding_from_codes(
                    creation.resource_type, creation.resource_name, getattr(creation, "resource_pattern_type", 3),
                    creation.principal, creation.host, creation.operation, creation.permission_type)
            except AclError as exc:
                result["error_code"], result["error_message"] = ErrorCode.invalid_request, str(exc)
                continue
            try:
                await asyncio.to_thread(self.acls.store.create, binding)
            except AclStoreError as exc:
                result["error_code"], result["error_message"] = ErrorCode.request_timed_out, str(exc)
                continue
            changed = True
            log.info("principal %s from %s created ACL %s", request.principal, request.client_host, binding)
        if changed:
            await self._announce_change()
        return respond(request, {"throttle_time": NO_THROTTLE, "results": results})

    async def delete_acls(self, request: Request) -> Any:
        filters = request.body.filters
        refusal = self._refusal(request, AclOperation.ALTER, "delete")
        if refusal is not None:
            results = [{"error_code": refusal[0], "error_message": refusal[1], "matching_acls": []} for _ in filters]
            return respond(request, {"throttle_time": NO_THROTTLE, "filter_results": results})
        results: list[dict[str, Any]] = []
        parsed: list[tuple[dict[str, Any], AclBindingFilter]] = []
        for entry in filters:
            result: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None, "matching_acls": []}
            results.append(result)
            try:
                parsed.append((result, AclBindingFilter.from_codes(
                    entry.resource_type_filter, entry.resource_name_filter, getattr(entry, "pattern_type_filter", 3),
                    entry.principal_filter, entry.host_filter, entry.operation, entry.permission_type)))
            except AclError as exc:
                result["error_code"], result["error_message"] = ErrorCode.invalid_request, str(exc)
        if parsed:
            try:
                deleted = await asyncio.to_thread(self.acls.store.delete_matching, [f for _, f in parsed])
            except AclStoreError as exc:
                for result, _ in parsed:
                    result["error_code"], result["error_message"] = ErrorCode.request_timed_out, str(exc)
                deleted = []
            for (result, _), bindings in zip(parsed, deleted, strict=False):
                result["matching_acls"] = [_matching_acl(b) for b in bindings]
            if any(deleted):
                log.info("principal %s from %s deleted ACLs %s", request.principal, request.client_host,
                         [b for bindings in deleted for b in bindings])
                await self._announce_change()
        return respond(request, {"throttle_time": NO_THROTTLE, "filter_results": results})

    async def _announce_change(self) -> None:
        try:
            await asyncio.to_thread(self.context.store.bump_metadata_version)
        except meta_errors.MetadataError as exc:
            # Stored, but other brokers learn of it only with the next metadata change.
            log.warning("ACLs changed but the metadata version was not bumped: %s", exc)
        await self.context.refresh_metadata()


def _matching_acl(binding: AclBinding) -> dict[str, Any]:
    return {"error_code": ErrorCode.none, "error_message": None, "resource_type": int(binding.resource_type),
            "resource_name": binding.resource_name, "pattern_type": int(binding.pattern_type),
            "principal": binding.principal, "host": binding.host, "operation": int(binding.operation),
            "permission_type": int(binding.permission)}
