"""Kafka wire protocol, sans-I/O: frames in, kio request entities out; response entities in, bytes out."""
