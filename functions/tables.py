"""The front ends' own DynamoDB tables, created where no template does it (the local stack).

``<prefix>http_idempotency`` is Powertools' idempotency table: hash key ``id`` (string), TTL on
``expiration``; ``<prefix>http_quota_buckets`` holds the quota buckets (functions.quotas). The HTTP consumer groups' two tables are described in broker_core.groups.models.
template.yaml declares the same tables for AWS, with point-in-time recovery and encryption.
"""

from __future__ import annotations

import time

import boto3
from botocore.exceptions import ClientError

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import TABLE_ACTIVE_TIMEOUT_S, wait_until_active
from broker_core.groups.store import HttpGroupStore
from functions.quotas import HttpQuotas
from functions.runtime import IDEMPOTENCY_TABLE


def ensure_idempotency_table(settings: AwsSettings) -> str:
    """Create the idempotency table if it is missing; its name once it is ACTIVE."""
    name = settings.table_prefix + IDEMPOTENCY_TABLE
    dynamodb = boto3.session.Session().client("dynamodb", **settings.boto3_kwargs())
    try:
        dynamodb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ResourceInUseException":
            raise
    wait_until_active(name, lambda: dynamodb.describe_table(TableName=name)["Table"]["TableStatus"],
                      time.monotonic() + TABLE_ACTIVE_TIMEOUT_S, TimeoutError)
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        dynamodb.update_time_to_live(TableName=name,
                                     TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"})
    return name


def ensure_tables(settings: AwsSettings) -> None:
    """Every table the front ends use beyond the brokers' own."""
    ensure_idempotency_table(settings)
    HttpGroupStore(settings).ensure_tables()
    HttpQuotas(settings).ensure_table()
