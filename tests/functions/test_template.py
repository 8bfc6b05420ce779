"""template.yaml passes cfn-lint and `sam validate --lint`, offline (a dummy region, no credentials)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cfnlint.decode import cfn_yaml

from functions.app import openapi_json

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(sys.executable).parent
OFFLINE = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0",
           "AWS_ACCESS_KEY_ID": "offline", "AWS_SECRET_ACCESS_KEY": "offline"}


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                          timeout=300)


def test_cfn_lint_passes() -> None:
    result = run(str(TOOLS / "cfn-lint"), "template.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_validate_lint_passes() -> None:
    result = run(str(TOOLS / "sam"), "validate", "--lint", "--template", "template.yaml", "--region", "us-east-1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def routed(template: dict) -> list[tuple[str, str]]:
    """(method, path) of every HttpApi event of every function in the template."""
    routes = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] == "HttpApi":
                routes.append((event["Properties"]["Method"], event["Properties"]["Path"]))
    return routes


def reaches(route: tuple[str, str], method: str, path: str) -> bool:
    routed_method, routed_path = route
    if routed_method not in ("ANY", method.upper()):
        return False
    if routed_path.endswith("/{proxy+}"):
        return path.startswith(routed_path.removesuffix("{proxy+}"))
    return routed_path == path


def test_every_operation_of_the_openapi_document_is_routed_to_a_function() -> None:
    template = cfn_yaml.loads((ROOT / "template.yaml").read_text())
    routes = routed(template)
    operations = [(method, path) for path, item in json.loads(openapi_json())["paths"].items() for method in item]
    assert operations
    for method, path in operations + [("GET", "/v1/openapi.json")]:
        assert any(reaches(route, method, path) for route in routes), (method, path)


def template() -> dict:
    return cfn_yaml.loads((ROOT / "template.yaml").read_text())


def resources(of_type: str) -> dict[str, dict]:
    return {name: r for name, r in template()["Resources"].items() if r["Type"] == of_type}


def statements(role: dict) -> list[dict]:
    found = []
    for policy in role["Properties"].get("Policies", []):
        document = policy.get("PolicyDocument") if isinstance(policy, dict) else None
        if document:
            found.extend(document["Statement"])
    return found


def as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]


def test_every_dynamodb_table_has_deletion_protection() -> None:
    tables = resources("AWS::DynamoDB::Table")
    assert {"AclsTable", "ClientQuotasTable", "HttpQuotaBucketsTable"} <= set(tables)
    for name, table in tables.items():
        assert table["Properties"].get("DeletionProtectionEnabled") is True, name


def test_the_alarm_topic_uses_a_customer_managed_key_cloudwatch_may_use() -> None:
    resources_ = template()["Resources"]
    topic = resources_["AlarmTopic"]["Properties"]
    assert topic["KmsMasterKeyId"] != "alias/aws/sns"
    key = resources_[topic["KmsMasterKeyId"]["Ref"]]
    assert key["Type"] == "AWS::KMS::Key"
    granted = [s for s in key["Properties"]["KeyPolicy"]["Statement"]
               if s["Effect"] == "Allow" and s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"]
    actions = {action for s in granted for action in as_list(s["Action"])}
    assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= actions
    for alarm in resources("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_brokers_may_write_and_delete_segment_objects_only() -> None:
    role = template()["Resources"]["BrokerTaskRole"]
    for statement in statements(role):
        actions = set(as_list(statement["Action"]))
        if actions & {"s3:DeleteObject", "s3:PutObject", "s3:*"}:
            targets = [r["Fn::Sub"] for r in as_list(statement["Resource"])]
            assert targets == ["${SegmentBucket.Arn}/*.log", "${SegmentBucket.Arn}/*.indexes"], statement


def test_listener_security_and_certificates_are_parameters_with_rules() -> None:
    parsed = template()
    parameters = parsed["Parameters"]
    assert parameters["ListenerSecurityProtocol"]["AllowedValues"] == ["PLAINTEXT", "SSL", "SASL_SSL"]
    assert parameters["ListenerSecurityProtocol"]["Default"] == "PLAINTEXT"  # a deployment is unchanged by default
    assert parameters["CertificateSource"]["AllowedValues"] == ["None", "AcmPrivateCa", "SecretsManager"]
    assert {"SecureListenersNeedACertificate", "PrivateCaNeedsItsArn", "SecretNeedsItsArn"} <= set(parsed["Rules"])
    container = parsed["Resources"]["BrokerTaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    settings = next(e["Value"] for e in container["Environment"] if e["Name"] == "FLOE_BROKER_SETTINGS")
    text = json.dumps(settings)
    for expected in ("listener.security.protocol.map=CLIENT:${ListenerSecurityProtocol},REPLICATION:SSL",
                     "inter.broker.listener.name=REPLICATION", "listener.name.replication.ssl.client.auth=required",
                     "ssl.keystore.location=/etc/floe/tls/broker.pem", "floe.sasl.oauthbearer.iam.sts.endpoint"):
        assert expected in text, expected
    user_data = json.dumps(parsed["Resources"]["BrokerLaunchTemplate"]["Properties"]["LaunchTemplateData"]["UserData"])
    assert "acm-pca issue-certificate" in user_data and "secretsmanager get-secret-value" in user_data


def test_brokers_reach_sts_through_an_endpoint_without_any_sts_permission() -> None:
    parsed = template()
    endpoint = parsed["Resources"]["StsEndpoint"]
    assert endpoint["Properties"]["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.sts"}
    assert endpoint["Properties"]["PrivateDnsEnabled"] is True
    actions = {a for s in statements(parsed["Resources"]["BrokerTaskRole"]) for a in as_list(s["Action"])}
    assert not any(a.startswith("sts:") for a in actions)  # a presigned GetCallerIdentity needs none


def test_every_front_end_function_reads_quotas_and_acls() -> None:
    for name, function in resources("AWS::Serverless::Function").items():
        assert {"Ref": "FrontEndQuotasAndAcls"} in function["Properties"]["Policies"], name
