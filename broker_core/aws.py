"""Where Floe finds its AWS services: endpoint, region, S3 bucket and DynamoDB table prefix.

Every component (broker nodes, front ends, Spark jobs, the local stack) reads the same four
settings, either from the environment or from the "aws" object of a stack description
(``{"endpoint_url", "region", "bucket", "table_prefix"}``). An endpoint URL of ``None`` means the
real AWS endpoints; the local stack points it at a moto server. Credentials are never part of these
settings: they come from botocore's usual chain (environment, profile, instance role).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_ENDPOINT_URL = "FLOE_AWS_ENDPOINT_URL"
ENV_BUCKET = "FLOE_BUCKET"
ENV_TABLE_PREFIX = "FLOE_TABLE_PREFIX"
DEFAULT_REGION = "us-east-1"
DEFAULT_BUCKET = "floe-data"
DEFAULT_TABLE_PREFIX = "floe-"

_FIELDS = ("endpoint_url", "region", "bucket", "table_prefix")


class InvalidAwsSettingsError(ValueError):
    """An "aws" settings object is missing a field, has an unknown one, or a value of the wrong type."""


@dataclass(frozen=True)
class AwsSettings:
    """Endpoint, region, bucket and table prefix shared by every Floe component."""

    endpoint_url: str | None
    region: str
    bucket: str
    table_prefix: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AwsSettings:
        """Read FLOE_AWS_ENDPOINT_URL, AWS_REGION (or AWS_DEFAULT_REGION), FLOE_BUCKET, FLOE_TABLE_PREFIX."""
        env = os.environ if environ is None else environ
        return cls(
            endpoint_url=env.get(ENV_ENDPOINT_URL) or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            bucket=env.get(ENV_BUCKET) or DEFAULT_BUCKET,
            table_prefix=env.get(ENV_TABLE_PREFIX, DEFAULT_TABLE_PREFIX),
        )

    def to_dict(self) -> dict[str, str | None]:
        """The "aws" object of a stack description."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AwsSettings:
        """Parse the "aws" object of a stack description; raises InvalidAwsSettingsError on bad input."""
        missing = [name for name in _FIELDS if name not in data]
        unknown = sorted(set(data) - set(_FIELDS))
        if missing or unknown:
            raise InvalidAwsSettingsError(f"aws settings: missing fields {missing}, unknown fields {unknown}")
        endpoint_url = data["endpoint_url"]
        if endpoint_url is not None and not isinstance(endpoint_url, str):
            raise InvalidAwsSettingsError("aws settings: endpoint_url must be a string or null")
        for name in ("region", "bucket", "table_prefix"):
            if not isinstance(data[name], str):
                raise InvalidAwsSettingsError(f"aws settings: {name} must be a string")
        return cls(
            endpoint_url=endpoint_url or None,
            region=data["region"],
            bucket=data["bucket"],
            table_prefix=data["table_prefix"],
        )

    def boto3_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``boto3.client(service, **kwargs)`` (and aioboto3's session.client)."""
        kwargs = {"region_name": self.region}
        if self.endpoint_url is not None:
            kwargs["endpoint_url"] = self.endpoint_url
        return kwargs
