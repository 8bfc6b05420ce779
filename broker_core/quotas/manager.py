"""QuotaManager: a broker's enforcement of client quotas, as Kafka's Client*QuotaManager classes do it.

The broker holds the configured quotas (`ClientQuotas`, replaced whole when the stored quotas
change) and, per quota key and client group (see `entities`), a measurement: a `SampledRate` for
``consumer_byte_rate`` (fetched bytes) and ``request_percentage`` (the share of one second the
broker's event loop spent handling the group's requests, in percent: 100 is the whole loop), a
`TokenBucket` for ``producer_byte_rate`` (request bytes) and for ``controller_mutation_rate``
(partitions created and deleted). Every ``record_*`` call answers the throttle time in seconds, 0
when the client is within its quota; the handlers put it in the response's ``throttle_time`` and the
listener mutes the connection that long after sending it (KIP-219). A client no quota applies to
costs one dictionary lookup per request: nothing is measured.

Why the producer's bytes go to a token bucket, not to Kafka's sampled rate: Kafka's Rate holds a
burst in one sample until the sample expires (its own `TokenBucket` javadoc says so, KIP-599). A
producer whose requests are large against its quota (librdkafka's default `batch.size` is 1 MB; at
1 MiB/s one request is a tenth of the span) then runs a saw-tooth: a burst of ``samples - 1``
windows' worth whenever the previous burst's sample expires, throttles of about two request-times
per request while it is held, and again. A broker log of every Produce of such a producer showed a
period of about 11.5 s, so a count over 22 s measured 0.78 of the quota, or up to 1.16, depending
on where it started (bench/quota_bench.py, docs/performance.md "Client quotas"). KIP-599's bucket
(burst ``quota * samples * window``, refilled at the quota) lets an idle client burst about as much
as Kafka's windows do, but a busy one pays each request back exactly: the throttle is the time the
bucket needs to refill to zero.

Measurements idle for longer than the quota span are dropped (Kafka expires its quota sensors after
an hour of inactivity; a span is enough, since an idle span leaves nothing to measure).

Metrics (issue 22, item 5): ``observer``, if given, hears of every measurement a quota applies to,
with the client group, the amount (bytes for the byte rates, percent-seconds for request time, a
partition count for mutations) and the throttle time given, 0 when within the quota.

Clock: the caller's monotonic seconds (``clock``). Not thread safe: used from the event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientIdentity,
    ClientQuotas,
)
from .rates import SampledRate, TokenBucket, WindowConfig

# (quota key, client group (user, client id), amount recorded, throttle seconds given)
QuotaObserver = Callable[[str, tuple[str, str], float, float], None]

_SWEEP_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class FetchRoom:
    """The most bytes a consumer's fetch may return now; 0 with ``wait_s`` when it must wait that long."""

    max_bytes: int
    wait_s: float

_KAFKA_WINDOWS = WindowConfig()


class QuotaManager:
    """A broker's quota measurements and the quotas they are held to (see the module doc)."""

    def __init__(self, windows: WindowConfig = _KAFKA_WINDOWS, controller_windows: WindowConfig = _KAFKA_WINDOWS,
                 clock: Callable[[], float] = time.monotonic, observer: QuotaObserver | None = None) -> None:
        self.windows = windows
        self.observer = observer
        self.controller_windows = controller_windows
        self.clock = clock
        self.quotas = ClientQuotas()
        self._keys: frozenset[str] = frozenset()
        self._rates: dict[tuple[str, tuple[str, str]], SampledRate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._fetch_buckets: dict[tuple[str, str], TokenBucket] = {}
        # per client group: its bucket and the quota it last refilled at (for the idle sweep)
        self._produce_buckets: dict[tuple[str, str], tuple[TokenBucket, float]] = {}
        self._pacing_window = WindowConfig(samples=1, window_s=windows.window_s)
        self._next_sweep_s = clock() + _SWEEP_INTERVAL_S

    def apply(self, quotas: ClientQuotas) -> None:
        """Hold clients to ``quotas`` from now on; measurements so far are kept."""
        self.quotas = quotas
        self._keys = frozenset(key for values in quotas.by_entity.values() for key in values)

    def enforces(self, key: str) -> bool:
        """Whether any entity has a quota for ``key`` (if not, nothing is measured for it)."""
        return key in self._keys

    # byte rates and request time -------------------------------------------------------------

    def record_produce(self, identity: ClientIdentity, nbytes: int) -> float:
        """Take a Produce request's size from its client group's token bucket (see the module doc);
        the throttle is the time the bucket needs to refill to zero, bounded by one span (a larger
        debt stays in the bucket and throttles the next request)."""
        if PRODUCER_BYTE_RATE not in self._keys:
            return 0.0
        match = self.quotas.resolve(identity, PRODUCER_BYTE_RATE)
        if match is None:
            return 0.0
        now = self.clock()
        found = self._produce_buckets.get(match.group)
        if found is None:
            self._maybe_sweep(now)
            bucket = TokenBucket(self.windows, match.limit, now)
        else:
            bucket = found[0]
        self._produce_buckets[match.group] = (bucket, match.limit)
        bucket.record(nbytes, match.limit, now)
        throttle_s = min(bucket.throttle_s(match.limit, now), self.windows.span_s)
        if self.observer is not None:
            self.observer(PRODUCER_BYTE_RATE, match.group, nbytes, throttle_s)
        return throttle_s

    def record_fetch(self, identity: ClientIdentity, nbytes: int) -> float:
        self._pace_fetch(identity, nbytes)
        return self._record(CONSUMER_BYTE_RATE, identity, nbytes, self.windows.span_s)

    def unrecord_fetch(self, identity: ClientIdentity, nbytes: int) -> None:
        """Take back fetched bytes that were not sent (a throttled fetch is answered empty)."""
        self._pace_fetch(identity, -nbytes)
        match = self.quotas.resolve(identity, CONSUMER_BYTE_RATE)
        rate = self._rates.get((CONSUMER_BYTE_RATE, match.group)) if match is not None else None
        if rate is not None:
            rate.record(-nbytes, self.clock())

    def fetch_room(self, identity: ClientIdentity) -> FetchRoom | None:
        """How much one fetch may return under the client's consumer quota, None without a quota.

        Kafka caps a response only at the quota over samples-1 windows (getMaxValueInQuotaWindow),
        so a consumer may take ten windows' worth in one burst; the sampled windows then hold that
        burst for a whole span and let the next one in when it expires, and the consumer's rate
        swings with the span as its period (bench/quota_bench.py measured 0.78 of a 10 MiB/s quota
        over 22 s). Floe also paces responses with a token bucket per client group that holds one
        window's share of the quota and refills at the quota: a response takes what it returns
        (Kafka's "at least one batch" may take the bucket below zero, a debt paid back before the
        next one), so the bytes spread evenly and the long-run rate is the quota. An empty bucket
        answers "wait until it holds a byte again": the fetch is answered empty with that
        throttle, and the connection is muted as after any throttled response.
        """
        match = self.quotas.resolve(identity, CONSUMER_BYTE_RATE) if CONSUMER_BYTE_RATE in self._keys else None
        if match is None:
            return None
        span_cap = max(1, int(match.limit * (self.windows.samples - 1) * self.windows.window_s))
        tokens = self._fetch_bucket(match.group, match.limit).available(match.limit, self.clock())
        if tokens < 1:
            return FetchRoom(0, (1 - tokens) / match.limit)
        return FetchRoom(min(span_cap, int(tokens)), 0.0)

    def _fetch_bucket(self, group: tuple[str, str], quota: float) -> TokenBucket:
        bucket = self._fetch_buckets.get(group)
        if bucket is None:
            now = self.clock()
            self._maybe_sweep(now)
            bucket = self._fetch_buckets[group] = TokenBucket(self._pacing_window, quota, now)
        return bucket

    def _pace_fetch(self, identity: ClientIdentity, nbytes: int) -> None:
        match = self.quotas.resolve(identity, CONSUMER_BYTE_RATE) if CONSUMER_BYTE_RATE in self._keys else None
        if match is not None:
            self._fetch_bucket(match.group, match.limit).record(nbytes, match.limit, self.clock())

    def record_request_time(self, identity: ClientIdentity, seconds: float) -> float:
        """Record ``seconds`` of event-loop time spent on a request; Kafka bounds this throttle by one window."""
        return self._record(REQUEST_PERCENTAGE, identity, seconds * 100.0, self.windows.window_s)

    def _record(self, key: str, identity: ClientIdentity, value: float, max_throttle_s: float) -> float:
        if key not in self._keys:
            return 0.0
        match = self.quotas.resolve(identity, key)
        if match is None:
            return 0.0
        now = self.clock()
        self._maybe_sweep(now)
        rate = self._rates.get((key, match.group))
        if rate is None:
            rate = self._rates[(key, match.group)] = SampledRate(self.windows, now)
        rate.record(value, now)
        throttle_s = rate.throttle_s(match.limit, now, max_throttle_s)
        if self.observer is not None:
            self.observer(key, match.group, value, throttle_s)
        return throttle_s

    # controller mutations (KIP-599) ----------------------------------------------------------

    def mutation_exceeded(self, identity: ClientIdentity) -> bool:
        """Whether the client's controller mutation quota is used up (a strict request is then refused)."""
        bucket, quota = self._bucket(identity)
        return bucket is not None and bucket.exceeded(quota, self.clock())

    def record_mutations(self, identity: ClientIdentity, partitions: int) -> None:
        bucket, quota = self._bucket(identity)
        if bucket is not None:
            bucket.record(partitions, quota, self.clock())

    def mutation_throttle(self, identity: ClientIdentity) -> float:
        bucket, quota = self._bucket(identity)
        throttle_s = bucket.throttle_s(quota, self.clock()) if bucket is not None else 0.0
        if throttle_s > 0 and self.observer is not None:
            match = self.quotas.resolve(identity, CONTROLLER_MUTATION_RATE)
            if match is not None:
                self.observer(CONTROLLER_MUTATION_RATE, match.group, 0.0, throttle_s)
        return throttle_s

    def _bucket(self, identity: ClientIdentity) -> tuple[TokenBucket | None, float]:
        if CONTROLLER_MUTATION_RATE not in self._keys:
            return None, 0.0
        match = self.quotas.resolve(identity, CONTROLLER_MUTATION_RATE)
        if match is None:
            return None, 0.0
        bucket = self._buckets.get(match.group)
        if bucket is None:
            now = self.clock()
            self._maybe_sweep(now)
            bucket = self._buckets[match.group] = TokenBucket(self.controller_windows, match.limit, now)
        return bucket, match.limit

    def _maybe_sweep(self, now: float) -> None:
        if now < self._next_sweep_s:
            return
        self._next_sweep_s = now + _SWEEP_INTERVAL_S
        idle_rate, idle_bucket = now - self.windows.span_s, now - self.controller_windows.span_s
        self._rates = {k: r for k, r in self._rates.items() if r.last_record_s >= idle_rate}
        self._buckets = {k: b for k, b in self._buckets.items() if b.last_record_s >= idle_bucket}
        self._fetch_buckets = {k: b for k, b in self._fetch_buckets.items() if b.last_record_s >= idle_rate}
        # A producer bucket idle for a span is dropped once it has refilled (a debt is not forgiven).
        self._produce_buckets = {k: (b, q) for k, (b, q) in self._produce_buckets.items()
                                 if b.last_record_s >= idle_rate or b.available(q, now) < q * self.windows.span_s}
