"""Kafka-style replication: followers pull from leaders; leaders keep the ISR honest."""
