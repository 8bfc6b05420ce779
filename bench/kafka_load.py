"""Load a broker through librdkafka the way the benches do: the same records, as fast as it takes them."""

from __future__ import annotations

from confluent_kafka import Producer


def produce_values(producer: Producer, topic: str, value: bytes, count: int, partition: int = 0) -> None:
    """Produce ``value`` ``count`` times to one partition, waiting (poll) whenever librdkafka's queue is
    full, then flush; RuntimeError if any record was not delivered."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=partition)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(300) != 0:
        raise RuntimeError("the producer did not deliver every record")
