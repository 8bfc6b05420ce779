"""template.yaml passes cfn-lint and `sam validate --lint`, offline (a dummy region, no credentials)."""

from __future__ import annotations

import functools
import json
import os
import re
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


@functools.cache
def template() -> dict:
    """template.yaml, parsed once (callers only read it)."""
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


def substituted(value: object) -> str:
    """A Fn::Sub's text with every ${...} replaced: by its own variable's value, a number for a Number
    parameter, else a placeholder, so a JSON document inside it can be parsed."""
    parsed = template()
    text, variables = (value, {}) if isinstance(value, str) else (value[0], value[1])
    text = text["Fn::Sub"] if isinstance(text, dict) else text

    def replacement(found: re.Match) -> str:
        name = found[1]
        if name in variables:
            return str(variables[name])
        if parsed["Parameters"].get(name, {}).get("Type") == "Number":
            return "1000"
        return "x"

    return re.sub(r"\$\{([^}!]+)\}", replacement, text)


def sub_of(value: dict) -> object:
    return value["Fn::Sub"]


BROKER_ALARMS = {
    "OfflinePartitionsAlarm": "kafka_controller_kafkacontroller_offlinepartitionscount",
    "UnderReplicatedPartitionsAlarm": "kafka_server_replicamanager_underreplicatedpartitions",
    "TieringLagAlarm": "floe_tiering_lag_bytes",
    "ConsumerLagAlarm": "kafka_consumergroup_lag",
}


def test_broker_alarms_watch_the_brokers_metrics_above_their_thresholds() -> None:
    parsed = template()
    alarms = parsed["Resources"]
    for name, metric in BROKER_ALARMS.items():
        alarm = alarms[name]["Properties"]
        assert (alarm["Namespace"], alarm["MetricName"]) == ("Floe/Brokers", metric), name
        assert alarm["Dimensions"] == [{"Name": "ClusterName", "Value": {"Ref": "AWS::StackName"}}]
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarms["OfflinePartitionsAlarm"]["Properties"]["Threshold"] == 0
    assert alarms["UnderReplicatedPartitionsAlarm"]["Properties"]["Threshold"] == 0
    assert alarms["TieringLagAlarm"]["Properties"]["Threshold"] == {"Ref": "TieringLagAlarmBytes"}
    assert alarms["ConsumerLagAlarm"]["Properties"]["Threshold"] == {"Ref": "ConsumerLagAlarmRecords"}
    assert {"TieringLagAlarmBytes", "ConsumerLagAlarmRecords"} <= set(parsed["Parameters"])


def test_every_function_has_its_errors_and_throttles_alarmed() -> None:
    resources_ = template()["Resources"]
    functions = set(resources("AWS::Serverless::Function"))
    watched: dict[str, set[str]] = {"Errors": set(), "Throttles": set()}
    for alarm in resources("AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        stats = [properties] + [m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m]
        for stat in stats:
            if stat.get("Namespace") == "AWS/Lambda":
                watched[stat["MetricName"]] |= {d["Value"]["Ref"] for d in stat["Dimensions"]}
    assert watched == {"Errors": functions, "Throttles": functions}
    assert all(name in resources_ for name in functions)


def test_the_dashboard_is_json_and_shows_every_alarm() -> None:
    resources_ = template()["Resources"]
    body = json.loads(substituted(sub_of(resources_["FloeDashboard"]["Properties"]["DashboardBody"])))
    alarm_widget = next(w for w in body["widgets"] if w["type"] == "alarm")
    shown = json.dumps(resources_["FloeDashboard"]["Properties"]["DashboardBody"])
    for name in resources("AWS::CloudWatch::Alarm"):
        assert "${" + name + ".Arn}" in shown, name
    assert len(alarm_widget["properties"]["alarms"]) == len(resources("AWS::CloudWatch::Alarm"))
    for metric in BROKER_ALARMS.values():
        assert metric in shown, metric


def agent_container() -> dict:
    containers = template()["Resources"]["BrokerTaskDefinition"]["Properties"]["ContainerDefinitions"]
    return next(c for c in containers if c["Name"] == "cloudwatch-agent")


def test_a_cloudwatch_agent_beside_each_broker_ships_the_alarmed_metrics_as_emf() -> None:
    agent = agent_container()
    assert agent["Essential"] is False
    environment = {e["Name"]: e["Value"] for e in agent["Environment"]}
    scrape = substituted(sub_of(environment["PROMETHEUS_CONFIG_CONTENT"]))
    assert 'targets: ["localhost:1000"]' in scrape  # the BrokerMetricsPort parameter
    config = json.loads(substituted(sub_of(environment["CW_CONFIG_CONTENT"])))
    prometheus = config["logs"]["metrics_collected"]["prometheus"]
    assert prometheus["prometheus_config_path"] == "env:PROMETHEUS_CONFIG_CONTENT"
    processor = prometheus["emf_processor"]
    assert processor["metric_namespace"] == "Floe/Brokers"
    for metric in [*BROKER_ALARMS.values(), "kafka_server_brokertopicmetrics_messagesin_total",
                   "kafka_server_brokertopicmetrics_bytesout_total", "kafka_network_requestmetrics_requests_total"]:
        declarations = [d for d in processor["metric_declaration"]
                        if any(re.search(selector, metric) for selector in d["metric_selectors"])]
        assert declarations, metric
        if metric in BROKER_ALARMS.values():  # the alarms read the ClusterName-only dimension set
            assert any(["ClusterName"] in d["dimensions"] for d in declarations), metric
    broker = template()["Resources"]["BrokerTaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    settings = json.dumps(next(e["Value"] for e in broker["Environment"] if e["Name"] == "FLOE_BROKER_SETTINGS"))
    assert "metrics.port=${BrokerMetricsPort}" in settings


def test_the_functions_log_in_to_the_frontend_listener_with_their_iam_role() -> None:
    parsed = template()
    broker = parsed["Resources"]["BrokerTaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    settings = json.dumps(next(e["Value"] for e in broker["Environment"] if e["Name"] == "FLOE_BROKER_SETTINGS"))
    assert "FRONTEND:SASL_PLAINTEXT" in settings and "FRONTEND:PLAINTEXT" not in settings
    assert "listener.name.frontend.sasl.enabled.mechanisms=OAUTHBEARER" in settings
    super_users = re.search(r"super\.users=(\S+)", settings)[1]
    assert "ANONYMOUS" not in super_users and "CN=floe-broker-1" in super_users
    audience = re.search(r"floe\.sasl\.oauthbearer\.iam\.audience=(\S+)", settings)[1]
    endpoint = re.search(r"floe\.sasl\.oauthbearer\.iam\.sts\.endpoint=(\S+)", settings)[1]
    condition, secured, plaintext = parsed["Globals"]["Function"]["Environment"]["Variables"]["FLOE_CLIENT_PROPERTIES"][
        "Fn::If"]
    assert (condition, plaintext) == ("SecureListener", "")
    properties = json.loads(sub_of(secured))
    assert (properties["security.protocol"], properties["sasl.mechanisms"]) == ("SASL_PLAINTEXT", "OAUTHBEARER")
    config = dict(pair.split("=", 1) for pair in properties["sasl.oauthbearer.config"].split())
    assert (config["audience"], config["sts_endpoint"]) == (audience, endpoint)  # what the brokers verify against
    assert parsed["Resources"]["StsEndpoint"]["Condition"] == "SecureListener"
