"""A broker's metrics: the families it updates as it works, and the registry its endpoint exposes.

Names are those the Prometheus JMX exporter's Kafka rules give Kafka's MBeans (lower case, the MBean
type and name run together: kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T is
``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}``), so dashboards and alerts written
for Kafka work; what Kafka has no MBean for is named ``floe_*``. docs/operations.md ("Metrics")
lists every one.

Gauges that are computed from the broker's state (partition counts, under-replicated partitions,
consumer lag, tiering lag, connections) are not kept up to date here: the parts that own that state
register collectors (`add_collector`) evaluated at scrape time.

With metrics off (``metrics.port`` negative) `topic` and `request` hand out null children, so the
produce and fetch paths cost one no-op call per update and nothing is kept; requests are still timed
if the slow-request log is on (``floe.request.slow.ms``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from typing import Protocol

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .aws_calls import DYNAMODB_CALLS
from .families import LAG_BUCKETS, SECOND_BUCKETS, CounterChild, Families, PendingObservations
from .requests import RequestClock, log_slow_request


class _Counter(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...


class _NullChild:
    """What metrics that are off update: nothing."""

    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        pass


_NULL = _NullChild()


class TopicMetrics:
    """Kafka's BrokerTopicMetrics for one topic, bound once: counted by the partition's leader."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "failed_produce", "failed_fetch")

    def __init__(self, messages_in: _Counter, bytes_in: _Counter, bytes_out: _Counter,
                 failed_produce: _Counter, failed_fetch: _Counter) -> None:
        self.messages_in = messages_in
        self.bytes_in = bytes_in
        self.bytes_out = bytes_out
        self.failed_produce = failed_produce
        self.failed_fetch = failed_fetch


NULL_TOPIC = TopicMetrics(_NULL, _NULL, _NULL, _NULL, _NULL)


class RequestMetrics:
    """Kafka's RequestMetrics for one request name and version, bound once: the version's request count,
    the name's seven time histograms (`times`, observed together: see `request_done`) and slow count."""

    __slots__ = ("name", "version", "requests", "times", "slow")

    def __init__(self, name: str, version: int, requests: CounterChild, times: PendingObservations,
                 slow: _Counter) -> None:
        self.name = name
        self.version = version
        self.requests = requests
        self.times = times
        self.slow = slow


NULL_REQUEST = RequestMetrics("", 0, CounterChild(), PendingObservations((), 1.0), _NULL)  # never reported to
_BYTE_RATE_QUOTAS = frozenset({"producer_byte_rate", "consumer_byte_rate"})

# (RequestMetrics name, what it times), in the order `request_done` observes them.
_REQUEST_TIMES = (
    ("totaltimems", "Time from a request having been read to its response having been written"),
    ("requestqueuetimems", "Time a request waited for the requests before it on its connection"),
    ("localtimems", "Time the broker worked on a request itself"),
    ("remotetimems", "Time a request waited on others: followers for acks=all, data for a fetch's min_bytes"),
    ("throttletimems", "Time a connection was muted after a response, for a client quota (KIP-219)"),
    ("responsequeuetimems", "Time a ready response waited for earlier responses on its connection"),
    ("responsesendtimems", "Time writing a response to the socket"),
)


def kafka_request_name(api: str, follower: bool = False) -> str:
    """The `request` label Kafka's RequestMetrics use: ``api_versions`` -> ``ApiVersions``; a Fetch is
    ``FetchConsumer`` or ``FetchFollower``."""
    name = "".join(part.capitalize() for part in api.split("_"))
    if name == "Fetch":
        return "FetchFollower" if follower else "FetchConsumer"
    return name


class BrokerMetrics:
    """Every metric one broker updates, and the registry its metrics endpoint serves.

    Not thread-safe except for the DynamoDB call counters (prometheus-client's, updated from the
    worker threads that call DynamoDB): update and collect on the broker's event loop.
    """

    def __init__(self, *, enabled: bool = True, slow_request_ms: int = -1) -> None:
        self.enabled = enabled
        self.slow_request_ms = slow_request_ms
        self._slow_s = slow_request_ms / 1000.0 if slow_request_ms >= 0 else math.inf
        self.registry = CollectorRegistry(auto_describe=False)
        self.families = families = Families()
        self.registry.register(families)
        for collector in DYNAMODB_CALLS.collectors():
            self.registry.register(collector)
        topic = ("topic",)
        self._messages_in = families.counter("kafka_server_brokertopicmetrics_messagesin",
                                             "Records appended by this broker as the partition's leader", topic)
        self._bytes_in = families.counter("kafka_server_brokertopicmetrics_bytesin",
                                          "Record batch bytes produced to this broker as the partition's leader", topic)
        self._bytes_out = families.counter("kafka_server_brokertopicmetrics_bytesout",
                                           "Record bytes sent to consumers (follower fetches not included)", topic)
        self._failed_produce = families.counter(
            "kafka_server_brokertopicmetrics_failedproducerequests",
            "Partitions of produce requests the leader refused to append (corrupt, too large, out of sequence...)", topic)
        self._failed_fetch = families.counter(
            "kafka_server_brokertopicmetrics_failedfetchrequests",
            "Partitions of consumer fetches that failed with an error other than not-leader or unknown", topic)
        self._topics: dict[str, TopicMetrics] = {}
        self._requests_total = families.counter("kafka_network_requestmetrics_requests",
                                                "Requests handled, by request name and version", ("request", "version"))
        # Observed in seconds into histograms of milliseconds, as Kafka's RequestMetrics report them.
        self._request_times = families.histogram_group(
            [families.histogram(f"kafka_network_requestmetrics_{name}", doc, ("request",)) for name, doc in _REQUEST_TIMES],
            unit=1000.0)
        self._slow = families.counter("floe_request_slow",
                                      "Requests slower than floe.request.slow.ms (each logged once)", ("request",))
        self._requests: dict[int, RequestMetrics] = {}
        self.isr_shrinks = families.counter("kafka_server_replicamanager_isrshrinks",
                                            "ISR shrinks written by this broker as leader").labels()
        self.isr_expands = families.counter("kafka_server_replicamanager_isrexpands",
                                            "ISR expansions written by this broker as leader").labels()
        self.elections = families.counter(
            "floe_controller_elections", "Partitions whose leader this broker's controller changed, by cause",
            ("cause",))
        self.election_seconds = families.histogram(
            "floe_controller_election_seconds", "Duration of controller passes that changed leaders", (),
            SECOND_BUCKETS).labels()
        self.controller_terms = families.counter(
            "floe_controller_terms", "Times this broker took the controller lease (a new controller epoch)").labels()
        self._quota_bytes = families.counter(
            "floe_quota_bytes", "Bytes recorded against a byte-rate quota, by quota and client group",
            ("quota", "user", "client_id"))
        self._quota_throttle = families.counter(
            "floe_quota_throttle_time_seconds", "Throttle time given to clients over a quota, by quota and client group",
            ("quota", "user", "client_id"))
        self._quota_throttled = families.counter(
            "floe_quota_throttled_responses", "Responses that carried a throttle time, by quota and client group",
            ("quota", "user", "client_id"))
        self.event_loop_lag = families.histogram(
            "floe_event_loop_lag_seconds",
            "How late the event loop ran a timer (sampled every floe.event.loop.lag.sample.ms)", (),
            LAG_BUCKETS).labels()
        self._s3_seconds = families.histogram("floe_s3_request_seconds",
                                              "S3 operations by the tiering service, retries included", ("operation",),
                                              SECOND_BUCKETS)
        self._s3_errors = families.counter("floe_s3_errors",
                                           "S3 operations that failed after their retries", ("operation",))

    # hot path: bind once, update often ----------------------------------------------------------

    def topic(self, name: str) -> TopicMetrics:
        """The topic's BrokerTopicMetrics children (bound on first use)."""
        bound = self._topics.get(name)
        if bound is None:
            if not self.enabled:
                return NULL_TOPIC
            bound = self._topics[name] = TopicMetrics(
                self._messages_in.labels(name), self._bytes_in.labels(name), self._bytes_out.labels(name),
                self._failed_produce.labels(name), self._failed_fetch.labels(name))
        return bound

    def forget_topics_except(self, known: Container[str]) -> None:
        """Stop reporting topics that are gone (Kafka removes a deleted topic's BrokerTopicMetrics too)."""
        for name in [name for name in self._topics if name not in known]:
            del self._topics[name]
            for family in (self._messages_in, self._bytes_in, self._bytes_out, self._failed_produce,
                           self._failed_fetch):
                family.remove(name)

    def request(self, api_key: int, version: int, api_names: Callable[[int], str],
                follower: bool = False) -> RequestMetrics:
        """The RequestMetrics children for one API version (bound on first use; ``api_names`` gives an API
        key's snake-case name, asked only then)."""
        key = api_key << 17 | version << 1 | follower  # an int: no tuple to build and hash per request
        bound = self._requests.get(key)
        if bound is None:
            if not self.enabled and self.slow_request_ms < 0:  # the slow-request log needs the timing
                return NULL_REQUEST
            name = kafka_request_name(api_names(api_key), follower)
            bound = self._requests[key] = RequestMetrics(
                name, version, self._requests_total.labels(name, str(version)), self._request_times.labels(name),
                self._slow.labels(name))
        return bound

    def request_done(self, clock: RequestClock, throttle_s: float, listener: str) -> None:
        """Count a request whose response was written (``clock.metrics`` says which), and log it if it was slow.

        Runs once per request, so it is written for speed: the split of `RequestClock.split_ms`,
        computed inline in seconds, goes to the time histograms' pending values (seven stores into an
        array of doubles, counted into buckets in bulk: broker_core.metrics.families).
        """
        bound: RequestMetrics = clock.metrics
        received = clock.received
        started = clock.started
        ready = clock.ready
        send_started = clock.send_started
        sent = clock.sent
        handling = ready - started
        local_done = clock.local_done
        waited = clock.remote_s if local_done is None else clock.remote_s + ready - local_done
        remote = 0.0 if waited < 0.0 else handling if waited > handling else waited
        total = sent - received
        bound.requests.value += 1
        times = bound.times
        values = times.values
        used = times.used
        values[used] = total
        values[used + 1] = started - received
        values[used + 2] = handling - remote
        values[used + 3] = remote
        values[used + 4] = throttle_s
        values[used + 5] = send_started - ready
        values[used + 6] = sent - send_started
        times.used = used = used + 7
        if used >= times.limit:
            times.fold()
        if total >= self._slow_s:
            bound.slow.inc()
            request = clock.request
            log_slow_request(bound.name, bound.version, request.client_id, request.principal, listener,
                             clock.split_ms(), throttle_s * 1000.0)

    # less frequent --------------------------------------------------------------------------

    def elections_done(self, elected: Mapping[str, int], seconds: float) -> None:
        """Partitions given a new leader by one controller pass or request, by cause
        (``floe_controller_elections_total``); the pass's time goes to ``floe_controller_election_seconds``
        once, if it elected any."""
        if not any(elected.values()):
            return
        for cause, count in elected.items():
            if count:
                self.elections.labels(cause).inc(count)
        self.election_seconds.observe(seconds)

    def quota_recorded(self, quota: str, group: tuple[str, str], amount: float, throttle_s: float) -> None:
        """A client group's use of a quota and the throttle it got (broker_core.quotas.manager reports);
        bytes are counted for the byte-rate quotas, as measured (a throttled fetch's bytes included)."""
        if not self.enabled:
            return
        user, client_id = group
        if quota in _BYTE_RATE_QUOTAS:
            self._quota_bytes.labels(quota, user, client_id).inc(amount)
        if throttle_s > 0:
            self._quota_throttle.labels(quota, user, client_id).inc(throttle_s)
            self._quota_throttled.labels(quota, user, client_id).inc()

    def s3_call(self, operation: str, seconds: float, failed: bool) -> None:
        """One S3 operation of the tiering service, with its retries (tiered_storage.object_store reports)."""
        if not self.enabled:
            return
        self._s3_seconds.labels(operation).observe(seconds)
        if failed:
            self._s3_errors.labels(operation).inc()

    # exposition ---------------------------------------------------------------------------------

    def add_collector(self, collector: Collector) -> None:
        """A collector of gauges computed from state at scrape time."""
        self.registry.register(collector)

    def collect(self) -> list[Metric]:
        """Every registered family as it is now (on the event loop: collectors read loop-owned state)."""
        return list(self.registry.collect())

    def exposition(self) -> bytes:
        """The Prometheus text format of everything registered (prometheus-client's exposition)."""
        return generate_latest(self.registry)

