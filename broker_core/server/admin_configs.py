"""AlterConfigs (API 33) and IncrementalAlterConfigs (44): changing a topic's configs over the Kafka protocol.

As Kafka answers them, resource by resource: altering a topic's configs needs ALTER_CONFIGS on the
topic (else TOPIC_AUTHORIZATION_FAILED), a broker's needs ALTER_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED). A resource's changes are all-or-nothing: the topic's configs as they
would be after every change are checked through the one settings registry (`validate_topic_configs`),
and an unknown name, a value the setting cannot take or an operation the setting does not allow is
INVALID_CONFIG naming the setting, with nothing written. AlterConfigs replaces the topic's whole set of
configs (names not given go back to their defaults); IncrementalAlterConfigs sets, deletes, appends to
or subtracts from single settings (append/subtract only on list settings, as Kafka). validate_only
checks and answers without writing. A change is written to DynamoDB with the topic's config version
as the condition and the metadata version bumped, so every broker applies it live within one metadata
poll (the partition logs take the new settings: retention, roll, cleanup.policy for the cleaner).

A BROKER resource names one broker (its id) or, named "", the cluster-wide default. Only the
settings the registry marks dynamic (`Setting.dynamic`: the replication throttles, the cleaner's)
may be changed; any other name, or a value the setting cannot take, is INVALID_CONFIG naming it, and
nothing of the resource is written. The values are stored in DynamoDB
(`broker_core.metadata.broker_configs`), conditional on their version and with the metadata version
bumped, so every broker applies them within one metadata poll; a broker's own value wins over the
cluster-wide default, which wins over the broker's static setting (DescribeConfigs reports which:
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG).
AlterConfigs replaces the resource's whole set of dynamic values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metadata import errors as meta_errors
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, RESOURCE_BROKER, RESOURCE_TOPIC, respond
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.settings import (
    BROKER_SETTINGS,
    DYNAMIC_DEFAULT,
    ConfigError,
    check_dynamic_broker_config,
    effective,
)

from .authorization import allowed, cluster_allowed
from .config import TopicConfigError, validate_topic_configs

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

# IncrementalAlterConfigs' config_operation values (Kafka's AlterConfigOp.OpType ids).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
# Topic settings whose value is a comma-separated list (Kafka's Type.LIST), the only ones APPEND and
# SUBTRACT apply to.
LIST_SETTINGS = frozenset({"cleanup.policy"})


class ConfigChangeError(Exception):
    """A resource's requested changes are refused; ``error_code`` is the Kafka error to answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def incremental_changes(current: Mapping[str, str], changes: list[tuple[str, int, str | None]],
                        fallback: Mapping[str, str], list_settings: frozenset[str] = LIST_SETTINGS) -> dict[str, str]:
    """The topic's configs after IncrementalAlterConfigs' ``changes`` (name, operation, value).

    ``fallback`` gives a setting's effective value where the topic sets none (what APPEND/SUBTRACT
    start from, as Kafka). Raises ConfigChangeError: a name given twice is INVALID_REQUEST, an
    unknown operation or APPEND/SUBTRACT on a setting that is not a list is INVALID_CONFIG.
    """
    names = [name for name, _, _ in changes]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigChangeError(ErrorCode.invalid_request, f"duplicate config keys: {', '.join(duplicates)}")
    result = dict(current)
    for name, operation, value in changes:
        if operation == OP_SET:
            if value is None:
                raise ConfigChangeError(ErrorCode.invalid_config, f"config {name!r} has no value to set")
            result[name] = value
        elif operation == OP_DELETE:
            result.pop(name, None)
        elif operation in (OP_APPEND, OP_SUBTRACT):
            if name not in list_settings:
                verb = "append" if operation == OP_APPEND else "subtract"
                raise ConfigChangeError(ErrorCode.invalid_config,
                                        f"config value {verb} is not allowed for config key: {name}")
            items = [item for item in result.get(name, fallback.get(name, "")).split(",") if item]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            if operation == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[name] = ",".join(items)
        else:
            raise ConfigChangeError(ErrorCode.invalid_config, f"unknown config operation {operation} for {name}")
    return result


class ConfigApis:
    """The two config-altering APIs of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    async def alter_configs(self, request: Request) -> Any:
        body = request.body
        responses = []
        for resource in body.resources:
            given = [(c.name, c.value) for c in resource.configs]

            def replace(current: Mapping[str, str], given: list[tuple[str, str | None]] = given) -> dict[str, str]:
                names = [name for name, _ in given]
                duplicates = sorted({name for name in names if names.count(name) > 1})
                if duplicates:
                    raise ConfigChangeError(ErrorCode.invalid_request, f"duplicate config keys: {', '.join(duplicates)}")
                missing = [name for name, value in given if value is None]
                if missing:
                    raise ConfigChangeError(ErrorCode.invalid_config, f"config {missing[0]!r} has no value")
                return {name: value for name, value in given if value is not None}

            responses.append(await self._alter(request, resource.resource_type, resource.resource_name,
                                               [name for name, _ in given], replace, body.validate_only))
        return respond(request, {"throttle_time": NO_THROTTLE, "responses": responses})

    async def incremental_alter_configs(self, request: Request) -> Any:
        body = request.body
        responses = []
        for resource in body.resources:
            changes = [(c.name, int(c.config_operation), c.value) for c in resource.configs]

            def apply(current: Mapping[str, str], changes: list[tuple[str, int, str | None]] = changes,
                      topic: bool = resource.resource_type == RESOURCE_TOPIC) -> dict[str, str]:
                fallback = {name: effective(current, self.context.config, name)
                            for name, _, _ in changes if topic and name in LIST_SETTINGS}
                return incremental_changes(current, changes, fallback, LIST_SETTINGS if topic else frozenset())

            responses.append(await self._alter(request, resource.resource_type, resource.resource_name,
                                               [name for name, _, _ in changes], apply, body.validate_only))
        return respond(request, {"throttle_time": NO_THROTTLE, "responses": responses})

    async def _alter(self, request: Request, resource_type: int, name: str, names: list[str],
                     change: Any, validate_only: bool) -> dict[str, Any]:
        result: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                                  "resource_type": resource_type, "resource_name": name}
        try:
            if resource_type == RESOURCE_TOPIC:
                await self._alter_topic(request, name, change, validate_only)
            elif resource_type == RESOURCE_BROKER:
                await self._alter_broker(request, name, names, change, validate_only)
            else:
                raise ConfigChangeError(ErrorCode.invalid_request, f"resource type {resource_type} is not supported")
        except ConfigChangeError as exc:
            result["error_code"], result["error_message"] = exc.error_code, str(exc)
            log.info("refused config change of resource %d %r from %s (%s): %s", resource_type, name,
                     request.client_host, request.principal, exc)
        return result

    async def _alter_topic(self, request: Request, topic: str, change: Any, validate_only: bool) -> None:
        if not allowed(self.context.authorizer, request, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, topic):
            raise ConfigChangeError(ErrorCode.topic_authorization_failed, "Authorization failed.")
        store = self.context.store
        try:
            current = await asyncio.to_thread(store.describe_topic_configs, topic)
        except meta_errors.UnknownTopicError:
            raise ConfigChangeError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist") from None
        except meta_errors.MetadataError as exc:
            raise ConfigChangeError(ErrorCode.request_timed_out, str(exc)) from None
        wanted = change(current)
        try:
            validate_topic_configs(wanted, self.context.config)
        except TopicConfigError as exc:
            raise ConfigChangeError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        updates = {key: value for key, value in wanted.items() if current.get(key) != value}
        removals = [key for key in current if key not in wanted]
        if not updates and not removals:
            return
        try:
            await asyncio.to_thread(store.alter_topic_configs, topic, updates, removals)
        except meta_errors.UnknownTopicError:
            raise ConfigChangeError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist") from None
        except meta_errors.InvalidConfigError as exc:
            raise ConfigChangeError(ErrorCode.invalid_config, str(exc)) from None
        except meta_errors.MetadataError as exc:
            raise ConfigChangeError(ErrorCode.request_timed_out, str(exc)) from None
        log.info("principal %s from %s altered configs of topic %s: set %s, removed %s", request.principal,
                 request.client_host, topic, updates, removals)
        # From the change sequence, as the regular poll: the topic's new configs are in its change item.
        await self.context.refresh_metadata(unless_at=await asyncio.to_thread(store.metadata_version))

    async def _alter_broker(self, request: Request, name: str, names: list[str], change: Any,
                            validate_only: bool) -> None:
        if not cluster_allowed(self.context.authorizer, request, AclOperation.ALTER_CONFIGS):
            raise ConfigChangeError(ErrorCode.cluster_authorization_failed, "Authorization failed.")
        if name == "":
            resource = DYNAMIC_DEFAULT
        else:
            try:
                broker_id = int(name)
            except ValueError:
                broker_id = -1
            if broker_id < 0:
                raise ConfigChangeError(ErrorCode.invalid_request, f"{name!r} is not a broker id (or \"\" for the "
                                        "cluster-wide default)")
            resource = str(broker_id)
        for config in names:
            setting = BROKER_SETTINGS.get(config)
            if setting is None or not setting.dynamic:
                try:
                    check_dynamic_broker_config(config, setting.default if setting else "")
                except ConfigError as exc:
                    raise ConfigChangeError(ErrorCode.invalid_config, str(exc)) from None
        store = self.context.store
        try:
            current = (await asyncio.to_thread(store.broker_configs)).get(resource, {})
        except meta_errors.MetadataError as exc:
            raise ConfigChangeError(ErrorCode.request_timed_out, str(exc)) from None
        wanted = change(current)
        for key, value in wanted.items():
            if current.get(key) != value:
                try:
                    check_dynamic_broker_config(key, value)
                except ConfigError as exc:
                    raise ConfigChangeError(ErrorCode.invalid_config, str(exc)) from None
        removals = [key for key in current if key not in wanted]
        for key in removals:
            if key not in BROKER_SETTINGS:
                raise ConfigChangeError(ErrorCode.invalid_config, f"unknown broker config {key!r}")
        updates = {key: value for key, value in wanted.items() if current.get(key) != value}
        if validate_only or (not updates and not removals):
            return
        try:
            await asyncio.to_thread(store.alter_broker_configs, resource, updates, removals)
        except meta_errors.MetadataError as exc:
            raise ConfigChangeError(ErrorCode.request_timed_out, str(exc)) from None
        log.info("principal %s from %s altered dynamic configs of broker %s: set %s, removed %s",
                 request.principal, request.client_host, name or "default", updates, removals)
        await self.context.refresh_metadata()
