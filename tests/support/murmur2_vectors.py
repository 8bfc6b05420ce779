"""Known murmur2 results of Kafka's Java client, for the tests of every murmur2 in Floe."""

# From Kafka's UtilsTest.testMurmur2: Java's signed 32-bit results.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
