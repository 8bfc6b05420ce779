"""The front ends authenticate to the brokers with their own IAM role (SASL OAUTHBEARER, the token a
presigned sts:GetCallerIdentity checked against moto's STS), so the brokers' ACLs decide what the role
may do: the handler code path through the local adapter against a real SASL_SSL broker with ACLs on."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import boto3
import pytest

from broker_core.client import EARLIEST, ClientSecurity, FloeClient
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.security.acl_store import AclStore
from broker_core.security.acls import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.functions.conftest import caller_arn, extra_adapter
from tests.functions.http_api import HttpApi
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC = f"iam-front-end-{uuid.uuid4().hex[:8]}"
# Its own SASL_SSL stack with ACLs on (and moto's STS): too slow for the default suite.
pytestmark = pytest.mark.faults

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "function-role-key", "AWS_SECRET_ACCESS_KEY": "function-role-secret"}
VALUE = {"value": {"type": "STRING", "data": "sent as the function's role"}}


def allow(principal: str, operation: AclOperation, resource_type: ResourceType = ResourceType.TOPIC,
          name: str = TOPIC) -> AclBinding:
    return AclBinding(resource_type, name, PatternType.LITERAL, principal, "*", operation, AclPermission.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("iam-front-end"), brokers=1, security="sasl_ssl",
                       overrides={"authorizer.class.name": STANDARD}) as stack:
        async def create() -> None:
            async with FloeClient(stack.bootstrap_servers, security=ClientSecurity.from_properties(
                    stack.client_config)) as admin:
                await admin.create_topic(TOPIC, 1, 1)

        asyncio.run(create())
        yield stack


@pytest.fixture(scope="module")
def function_principal(secured: LocalStack) -> str:
    """The principal the broker gives the function's IAM token: ``User:`` and the ARN STS reports for
    the function's credentials. (moto's STS reports its default user for every presigned
    GetCallerIdentity, whatever credentials signed it; AWS's reports the function's role session,
    which the broker maps to the role, `broker_core.security.iam`.)"""
    sts = boto3.client("sts", endpoint_url=secured.sts.endpoint_url, region_name=secured.region,
                       aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    return f"User:{sts.get_caller_identity()['Arn']}"


@pytest.fixture(scope="module")
def alice(secured: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpApi]:
    """The local adapter as a deployed function runs: its broker client signs IAM tokens with its own
    AWS credentials, and the HTTP caller alice may write the topic."""
    store = AclStore(secured.aws)
    store.ensure_table()
    store.create(allow(f"User:{caller_arn('alice')}", AclOperation.WRITE))
    client_properties = {
        "security.protocol": "SASL_SSL", "ssl.ca.location": secured.client_config["ssl.ca.location"],
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.config": f"audience={secured.iam_audience} region={secured.region} "
                                   f"sts_endpoint={secured.sts.endpoint_url}",
    }
    token = uuid.uuid4().hex
    with extra_adapter(secured, tmp_path_factory.mktemp("iam-adapter"),
                       FLOE_CLIENT_PROPERTIES=json.dumps(client_properties),
                       FLOE_HTTP_CALLERS=json.dumps({token: caller_arn("alice")}),
                       FLOE_AUTHORIZER_CLASS_NAME=STANDARD, **CREDENTIALS) as url:
        yield HttpApi(url, token)


def records_in(stack: LocalStack) -> list[bytes]:
    async def read() -> list[bytes]:
        async with FloeClient(stack.bootstrap_servers,
                              security=ClientSecurity.from_properties(stack.client_config)) as admin:
            fetched = await admin.fetch(TOPIC, 0, (await admin.list_offsets(TOPIC, 0, EARLIEST))[0])
            return [record.value for record in fetched.records]

    return asyncio.run(read())


def test_the_brokers_acls_decide_what_the_functions_role_may_do(secured: LocalStack, alice: HttpApi,
                                                                function_principal: str) -> None:
    # alice may write the topic on the HTTP API, but the function's role has no ACL on the broker yet:
    # the broker refuses the function (authenticated as its role), a 502 since the caller is not at fault.
    refused = alice.post(f"/v1/topics/{TOPIC}/records", VALUE)
    assert refused.status == 502, refused.body
    assert refused.body["kafka_error"] == "topic_authorization_failed"
    assert records_in(secured) == []

    store = AclStore(secured.aws)
    for operation in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.WRITE):
        store.create(allow(function_principal, operation))
    MetadataStore(secured.aws).bump_metadata_version()
    answers = []
    wait_until(lambda: answers.append(alice.post(f"/v1/topics/{TOPIC}/records", VALUE)) or answers[-1].status == 200,
               lambda: f"the broker lets the function's role write (last: {answers[-1].body})", 30.0)
    assert answers[-1].body["results"][0]["offset"] == 0
    assert records_in(secured) == [b"sent as the function's role"]
