"""Topic administration over HTTP: create, list, describe and delete, sent to the brokers' admin APIs.

Request and answer fields use Confluent REST v3's names (``topic_name``, ``partitions_count``,
``replication_factor``, ``configs`` as ``[{name, value}]``). The brokers check names, counts and
configs and write the change to DynamoDB; their refusals come back as 4xx (see functions.errors).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from broker_core.client import FloeClient, KafkaError, TopicInfo
from broker_core.security.acls import AclOperation, ResourceType
from functions import runtime
from functions.authorization import CLUSTER_RESOURCE
from functions.errors import ApiError, api_error_for, responses
from functions.models import (
    TOPIC_NAME_PATTERN,
    CreateTopicRequest,
    PartitionDescription,
    TopicDescription,
    TopicList,
    TopicSummary,
)

router = Router()


def _summary(info: TopicInfo) -> TopicSummary:
    return TopicSummary(
        topic_name=info.name,
        topic_id=str(info.topic_id) if info.topic_id else None,
        partitions_count=info.num_partitions,
        replication_factor=max((len(p.replicas) for p in info.partitions), default=0),
    )


def _description(info: TopicInfo, configs: dict[str, str | None]) -> TopicDescription:
    return TopicDescription(
        **_summary(info).model_dump(),
        partitions=[
            PartitionDescription(partition_id=p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
                                 replicas=list(p.replicas), isr=list(p.isr))
            for p in info.partitions
        ],
        configs=configs,
    )


def _call(work: Any) -> Any:
    try:
        return runtime.current().call(work)
    except KafkaError as error:
        raise api_error_for(error) from error


@router.post(
    "/v1/topics",
    summary="Create a topic",
    tags=["topics"],
    responses=responses(TopicDescription, 403, 400, 409, 415, 422, 502, 503, status=HTTPStatus.CREATED),
)
def create_topic(body: Annotated[CreateTopicRequest, Body()]) -> Response[TopicDescription]:
    if not runtime.allows(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        runtime.require(AclOperation.CREATE, ResourceType.TOPIC, body.topic_name)
    configs: dict[str, str] = {}
    for number, config in enumerate(body.configs):
        if config.value is None:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, f"configs.{number}: {config.name} needs a value")
        configs[config.name] = config.value

    async def create(client: FloeClient) -> TopicDescription:
        info = await client.create_topic(body.topic_name, body.partitions_count, body.replication_factor, configs)
        return _description(info, await client.describe_configs(body.topic_name))

    description = _call(create)
    runtime.current().forget(("partitions", body.topic_name))
    runtime.current().forget(("topic", body.topic_name))
    return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                    body=description.model_dump(mode="json"))


@router.get("/v1/topics", summary="List topics", tags=["topics"], responses=responses(TopicList, 502, 503))
def list_topics() -> TopicList:
    async def listing(client: FloeClient) -> TopicList:
        await client.list_topics()
        return TopicList(topics=[_summary(client.topics[name]) for name in sorted(client.topics)])

    listed = _call(listing)
    # As Metadata does, leave out the topics the caller may not describe.
    return TopicList(topics=[t for t in listed.topics
                             if runtime.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name)])


@router.get(
    "/v1/topics/<topic>",
    summary="Describe a topic: partitions, leaders, ISR and configs",
    tags=["topics"],
    responses=responses(TopicDescription, 403, 404, 422, 502, 503),
)
def describe_topic(topic: Annotated[str, Path(pattern=TOPIC_NAME_PATTERN)]) -> TopicDescription:
    runtime.require(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
    async def describe(client: FloeClient) -> TopicDescription:
        info = await client.describe_topic(topic)
        return _description(info, await client.describe_configs(topic))

    return _call(describe)


@router.delete(
    "/v1/topics/<topic>",
    summary="Delete a topic",
    tags=["topics"],
    responses=responses(None, 403, 404, 422, 502, 503, status=HTTPStatus.NO_CONTENT),
)
def delete_topic(topic: Annotated[str, Path(pattern=TOPIC_NAME_PATTERN)]) -> Response[None]:
    runtime.require(AclOperation.DELETE, ResourceType.TOPIC, topic)
    async def delete(client: FloeClient) -> None:
        await client.delete_topic(topic)

    _call(delete)
    for key in (("partitions", topic), ("topic", topic), ("max.message.bytes", topic)):
        runtime.current().forget(key)
    return Response(status_code=HTTPStatus.NO_CONTENT)
