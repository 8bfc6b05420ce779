"""Who calls the HTTP API: the IAM identity API Gateway authenticated, as a Kafka principal.

The API's routes use API Gateway's IAM authorizer: a request carries a SigV4 signature, API Gateway
checks it and puts the signer's ARN in the event at ``requestContext.authorizer.iam.userArn`` (an
assumed role's session ARN, ``arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION``, as STS reports it).
The front end's principal is ``User:<that ARN>``, with assumed-role sessions mapped to their role
(``arn:aws:iam::ACCOUNT:role/NAME``), the same principal the Kafka listener gives an IAM
OAUTHBEARER token, so one set of ACLs and quotas applies on both doors. The local adapter builds
the same field from the bearer token a caller presents (`functions.local_adapter`). An event
without an IAM identity (a route deployed without the authorizer) is ``User:ANONYMOUS``, as a
PLAINTEXT Kafka listener's clients are.
"""

from __future__ import annotations

import re
from typing import Any

from broker_core.security.principal import ANONYMOUS, KafkaPrincipal

_ASSUMED_ROLE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+$")


def role_arn(arn: str) -> str:
    """An assumed-role session ARN as its role's ARN; any other ARN as it is."""
    found = _ASSUMED_ROLE.match(arn)
    if found is None:
        return arn
    return f"arn:{found['partition']}:iam::{found['account']}:role/{found['role']}"


def principal_of(event: dict[str, Any]) -> str:
    """The Kafka principal of an API Gateway HTTP API (payload 2.0) event."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, dict) else None
    iam = authorizer.get("iam") if isinstance(authorizer, dict) else None
    arn = iam.get("userArn") if isinstance(iam, dict) else None
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        return ANONYMOUS
    return str(KafkaPrincipal.user(role_arn(arn)))


def source_ip(event: dict[str, Any]) -> str:
    """The caller's address as API Gateway saw it (``requestContext.http.sourceIp``), "" if absent."""
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, dict) else None
    address = http.get("sourceIp") if isinstance(http, dict) else None
    return address if isinstance(address, str) else ""
