"""The DataFrame schema of the ``floe`` source: exactly that of Spark's Kafka source.

key and value are binary (null for a null key or value), topic a string, partition an int, offset a
long, timestamp a timestamp (milliseconds from the record, or the batch's LogAppendTime),
timestampType an int (0 CreateTime, 1 LogAppendTime) and, only with ``includeHeaders``, headers an
array of (key string, value binary) structs that is null for a record without headers.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with or without the headers column."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)
