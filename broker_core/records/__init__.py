"""Sans-I/O codec for Kafka RecordBatch v2: the one byte format Floe uses on the wire, on disk and in S3."""
