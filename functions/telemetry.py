"""The front ends' Powertools Logger, Metrics and Tracer, shared by every route module.

Metrics go to the CloudWatch namespace ``Floe`` as embedded-metric-format log lines, flushed once
per invocation by `functions.app.lambda_handler`; traces go to X-Ray. The local adapter turns both
off (POWERTOOLS_METRICS_DISABLED, POWERTOOLS_TRACE_DISABLED), since nothing locally receives them.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "floe-http"
METRICS_NAMESPACE = "Floe"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)
