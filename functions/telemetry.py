"""The front ends' Powertools Logger, Metrics and Tracer, shared by every route module, and the metrics they emit.

Metrics go to the CloudWatch namespace ``Floe`` as embedded-metric-format (EMF) log lines, written by
`functions.app.lambda_handler` once per invocation; traces go to X-Ray. The local adapter turns both
off (POWERTOOLS_METRICS_DISABLED, POWERTOOLS_TRACE_DISABLED), since nothing locally receives them.

The metrics carry the names the brokers' Prometheus endpoint gives the same facts (the JMX exporter's
Kafka names, DESIGN decision 15), so one alarm or dashboard reads both doors:

- per topic (dimension ``topic``, with ``service``), on the invocation's metric set:
  ``kafka_server_brokertopicmetrics_messagesin_total`` (records appended), ``..._bytesin_total``
  (bytes of the record batches appended), ``..._bytesout_total`` (bytes of the record batches read
  for an answer, from a broker or from S3), ``..._failedproducerequests_total`` and
  ``..._failedfetchrequests_total`` (a produce or fetch that passed its ACL check and was then
  answered with an error);
- per request (dimension ``request``, Kafka's name of the request the route stands for, see
  `request_name`), one EMF line each: ``kafka_network_requestmetrics_requests_total`` and
  ``kafka_network_requestmetrics_totaltimems`` (the handler's time, milliseconds);
- ``ColdStart`` (Powertools' own, dimension ``function_name``), once per new container.
"""

from __future__ import annotations

import re
import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

SERVICE = "floe-http"
METRICS_NAMESPACE = "Floe"

MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
FAILED_PRODUCE_REQUESTS = "kafka_server_brokertopicmetrics_failedproducerequests_total"
FAILED_FETCH_REQUESTS = "kafka_server_brokertopicmetrics_failedfetchrequests_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
REQUEST_TIME_MS = "kafka_network_requestmetrics_totaltimems"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)
# Most routes have no per-topic metric: an empty metric set at the end of an invocation is normal.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
# Request metrics carry another dimension than the per-topic ones, so they go out on their own line:
# EphemeralMetrics, unlike Metrics, shares no metric set with other instances.
_request_metrics = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=SERVICE)

# (method, path) of each route -> the Kafka request it stands for (functions.authorization lists the same).
_REQUESTS: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (method, re.compile(pattern), name) for method, pattern, name in (
        ("POST", r"/v1/topics/[^/]+/records", "Produce"),
        ("GET", r"/v1/topics/[^/]+/partitions/[^/]+/records", "Fetch"),
        ("POST", r"/v1/topics", "CreateTopics"),
        ("GET", r"/v1/topics(/[^/]+)?", "Metadata"),
        ("DELETE", r"/v1/topics/[^/]+", "DeleteTopics"),
        ("POST", r"/v1/groups/[^/]+/members", "JoinGroup"),
        ("POST", r"/v1/groups/[^/]+/members/[^/]+/heartbeat", "Heartbeat"),
        ("DELETE", r"/v1/groups/[^/]+/members/[^/]+", "LeaveGroup"),
        ("GET", r"/v1/groups/[^/]+", "DescribeGroups"),
        ("POST", r"/v1/groups/[^/]+/offsets", "OffsetCommit"),
        ("GET", r"/v1/groups/[^/]+/offsets", "OffsetFetch"),
        ("GET", r"/v1/openapi\.json", "OpenApi"),
    ))
UNKNOWN_REQUEST = "Unknown"


def request_name(method: str, path: str) -> str:
    """Kafka's name of the request an HTTP call stands for ("Produce", "Fetch", ...), else "Unknown"."""
    for routed_method, pattern, name in _REQUESTS:
        if routed_method == method.upper() and pattern.fullmatch(path):
            return name
    return UNKNOWN_REQUEST


def count_topic(name: str, topic: str, value: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """Add ``value`` to the per-topic metric ``name`` of this invocation (dimension ``topic``)."""
    metrics.add_dimension(name="topic", value=topic)
    metrics.add_metric(name=name, unit=unit, value=value)


def record_request(request: str, elapsed_ms: float) -> None:
    """One request of kind ``request`` that took ``elapsed_ms``: its own EMF line (dimension ``request``)."""
    _request_metrics.add_dimension(name="request", value=request)
    _request_metrics.add_metric(name=REQUESTS, unit=MetricUnit.Count, value=1)
    _request_metrics.add_metric(name=REQUEST_TIME_MS, unit=MetricUnit.Milliseconds, value=elapsed_ms)
    _request_metrics.flush_metrics()
