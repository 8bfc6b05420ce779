"""Broker metrics: Prometheus families named as the JMX exporter's Kafka rules name Kafka's MBeans.

`families` holds counter and histogram families whose children are plain objects updated on the
broker's event loop; `broker` holds a broker's metrics (`BrokerMetrics`) and the null ones used when
metrics are off; `requests` times a request through the listener (Kafka's RequestMetrics split) and
logs slow ones; `aws_calls` counts DynamoDB and S3 calls; `endpoint` serves the exposition (made by
prometheus-client) over HTTP on the event loop. This package sits beside the settings registry at
the bottom of the layers: every other part of the broker may report to it, and it imports none of them.
"""
