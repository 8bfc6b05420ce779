"""deploy/grafana/floe.json: a Grafana dashboard that queries only metrics the brokers export, under the
names issue 27 gives them (the JMX exporter's Kafka names and Floe's own), with well-formed panels."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "floe.json"

# What a broker's Prometheus endpoint exports (issue 27, item 1); histograms are listed by their base name.
BROKER_COUNTERS_AND_GAUGES = {
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_failedproducerequests_total",
    "kafka_server_brokertopicmetrics_failedfetchrequests_total",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpands_total",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_network_requestmetrics_requests_total",
    "kafka_consumergroup_lag",
    "kafka_consumergroup_lag_seconds",
    "floe_tiering_lag_bytes",
}
BROKER_HISTOGRAMS = {"kafka_network_requestmetrics_totaltimems"}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# Labels each metric carries (issue 27), for the `by (...)` clauses.
LABELS = {"topic", "partition", "group", "request", "le", "job", "instance"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                "unless"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(board: dict) -> list[str]:
    found = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":  # Grafana's label_values(metric, label): the metric is PromQL
            found.append(re.fullmatch(r"label_values\((.+), *\w+\)", variable["query"]["query"])[1])
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords or labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def exported(name: str) -> bool:
    if name in BROKER_COUNTERS_AND_GAUGES:
        return True
    return any(name.endswith(suffix) and name.removesuffix(suffix) in BROKER_HISTOGRAMS for suffix in HISTOGRAM_SERIES)


def test_every_metric_the_dashboard_queries_is_one_the_brokers_export() -> None:
    read = set()
    for expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        read |= names
    assert {name for name in read if not exported(name)} == set()
    # the questions of issue 27 each have a panel: health, throughput, lag, tiering, requests
    for needed in ("kafka_controller_kafkacontroller_offlinepartitionscount",
                   "kafka_server_replicamanager_underreplicatedpartitions", "kafka_consumergroup_lag",
                   "kafka_consumergroup_lag_seconds", "floe_tiering_lag_bytes",
                   "kafka_server_brokertopicmetrics_messagesin_total",
                   "kafka_network_requestmetrics_totaltimems_bucket"):
        assert needed in read, needed


def test_the_metric_name_reader_finds_names_and_skips_functions_labels_and_strings() -> None:
    expr = ('histogram_quantile(0.99, sum by (request, le) (rate(kafka_network_requestmetrics_totaltimems_bucket'
            '{job=~"a|b", request="Produce"}[5m]))) / on (instance) up')
    assert metric_names(expr) == {"kafka_network_requestmetrics_totaltimems_bucket", "up"}
    assert not exported("up") and not exported("kafka_network_requestmetrics_totaltimems_total")


def test_panels_have_unique_ids_fit_the_grid_and_use_the_datasource_variable() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        position = panel["gridPos"]
        assert 0 <= position["x"] and position["x"] + position["w"] <= 24, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            for group in re.findall(r"\bby \(([^)]*)\)", target["expr"]):
                assert {label.strip() for label in group.split(",")} <= LABELS, target["expr"]
