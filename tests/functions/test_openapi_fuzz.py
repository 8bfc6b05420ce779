"""schemathesis against the generated OpenAPI document: no generated request makes the API answer 5xx.

Every operation gets a bounded number of generated requests (valid and invalid bodies, paths and
query strings) sent over HTTP to the local adapter of a running stack; each answer must not be a
server error and must match the status codes and schemas the document declares.
"""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from broker_core.local_stack import LocalStack
from functions.app import openapi_json

schema = schemathesis.openapi.from_dict(json.loads(openapi_json()))
EXAMPLES_PER_OPERATION = 30
API_GATEWAY_TIMEOUT_S = 30  # what an HTTP API waits for its integration


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
def test_no_generated_request_gets_a_server_error(case: schemathesis.Case, http_stack: LocalStack) -> None:
    http = http_stack.describe()["http"]
    case.call_and_validate(base_url=http["url"], headers={"Authorization": f"Bearer {http['token']}"},
                           checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
                           timeout=API_GATEWAY_TIMEOUT_S)
