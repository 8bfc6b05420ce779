"""Counter and histogram families whose children are updated on one event loop, without locks.

prometheus-client's own values take a lock on every update so that any thread may change them; a
broker changes its metrics only on its event loop, and the lock is most of the cost: on the bench
machine `Histogram.labels(...).observe` took 3.0 µs and `Counter.labels(...).inc` 1.4 µs, and a
request updates seven histograms (Kafka's RequestMetrics split). These families keep each child's
values in slots of a plain object (an `inc` is one attribute add, an `observe` a bisect and two
adds) and hand prometheus-client metric families to its exposition when collected.

Callers bind a child once (`labels`) and keep it: the produce and fetch paths hold one child per
topic and per API, so the hot path never builds a label tuple. Not thread-safe: update and collect
from the event loop that owns the broker (the metrics endpoint runs on it).

Histograms that are always observed together, one value each per event (the seven RequestMetrics
times of a request), form a `HistogramGroup`: an event stores its values in one fixed array of
doubles of its label set (`PendingObservations`), and they are counted into the buckets in bulk when
the group is collected or when `FOLD_AFTER_EVENTS` events wait. A request then costs seven stores
instead of seven observe calls, and the counting is cheaper in bulk: values under the first bound (most request
times) are counted by one comprehension, the rest sorted and cut by one bisection per bound, sums
taken by `sum`. Counts are exact: every value is counted, and a scrape counts whatever waits before
it reads a bucket.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Request time buckets in milliseconds, as Kafka's RequestMetrics report them (…timems).
MILLISECOND_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                       10000.0, 30000.0)
SECOND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Event-loop lag in seconds: a healthy loop is late by well under a millisecond.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Events a group's label set keeps raw before counting them (values kept: this times the group's width).
FOLD_AFTER_EVENTS = 1024


class CounterChild:
    """One labelled counter: `inc` adds to it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    """One labelled histogram: `observe` counts a value into the first bucket whose bound holds it."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Sequence[float], unit: float = 1.0) -> None:
        """Count every value of ``values``, each given in units ``unit`` times smaller than the bounds'
        (1000.0: seconds into a histogram of milliseconds). A value lands where `observe` would put
        ``value * unit``, but for one within a rounding error of a bound."""
        if not values:
            return
        bounds = self.bounds
        counts = self.counts
        self.sum += sum(values) * unit
        # Most request times fall in the first bucket: count those without sorting them (a list
        # comprehension is about twice as fast here as filter() with a bound method).
        first = bounds[0] / unit if bounds else -math.inf
        over = [value for value in values if value > first]
        below = len(values) - len(over)
        counts[0] += below
        if not over:
            return
        over.sort()
        below, size = 0, len(over)
        for index in range(1, len(bounds)):
            upto = bisect_right(over, bounds[index] / unit)
            counts[index] += upto - below
            below = upto
            if below == size:
                return
        counts[-1] += size - below


class CounterFamily:
    """Counters that share a name and label names; ``name`` without the ``_total`` suffix."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.children: dict[tuple[str, ...], CounterChild] = {}

    def labels(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self.children[values] = CounterChild()
        return child

    def remove(self, *values: str) -> None:
        self.children.pop(values, None)

    def family(self) -> CounterMetricFamily:
        metric = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self.children.items():
            metric.add_metric(values, child.value)
        return metric


class HistogramFamily:
    """Histograms that share a name, label names and bucket bounds."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 bounds: Sequence[float] = MILLISECOND_BUCKETS) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(sorted(bounds))
        self.children: dict[tuple[str, ...], HistogramChild] = {}

    def labels(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self.children[values] = HistogramChild(self.bounds)
        return child

    def family(self) -> HistogramMetricFamily:
        metric = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        names = [_bound_text(b) for b in self.bounds] + ["+Inf"]
        for values, child in self.children.items():
            cumulative, buckets = 0, []
            for name, count in zip(names, child.counts, strict=True):
                cumulative += count
                buckets.append((name, cumulative))
            metric.add_metric(values, buckets, child.sum)
        return metric


class PendingObservations:
    """One label set of a `HistogramGroup`: each event's values, in the group's order, wait in the first
    ``used`` slots of ``values`` (the hot path stores them there directly and moves ``used``) until
    `fold` counts them into the histograms.

    ``values`` is an array of doubles of fixed size, allocated once: storing a value keeps no Python
    float alive. A list of the pending floats kept seven float objects per request alive for up to
    FOLD_AFTER_EVENTS requests and freed them all at once, spreading them among the requests' own
    objects in the allocator's pools.
    """

    __slots__ = ("children", "unit", "values", "used", "limit")

    def __init__(self, children: Sequence[HistogramChild], unit: float) -> None:
        self.children = tuple(children)
        self.unit = unit
        self.limit = FOLD_AFTER_EVENTS * len(self.children)  # callers fold once ``used`` reaches it
        self.values = array("d", bytes(8 * self.limit))
        self.used = 0

    def observe(self, *values: float) -> None:
        """One event: one value per histogram of the group, in its order."""
        used = self.used
        if len(values) != len(self.children):
            raise ValueError(f"{len(values)} values for a group of {len(self.children)} histograms")
        self.values[used:used + len(values)] = array("d", values)
        self.used = used + len(values)
        if self.used >= self.limit:
            self.fold()

    def fold(self) -> None:
        used, width, values = self.used, len(self.children), self.values
        if not used:
            return
        for offset, child in enumerate(self.children):
            child.observe_many(values[offset:used:width], self.unit)
        self.used = 0


class HistogramGroup:
    """Histogram families with the same label names that one event observes together (see the module
    doc); their values are given in units ``unit`` times smaller than their bounds'."""

    def __init__(self, members: Sequence[HistogramFamily], unit: float = 1.0) -> None:
        self.members = tuple(members)
        if len({member.labelnames for member in self.members}) > 1:
            raise ValueError("the histograms of a group take the same labels")
        self.unit = unit
        self.bound: dict[tuple[str, ...], PendingObservations] = {}

    def labels(self, *values: str) -> PendingObservations:
        bound = self.bound.get(values)
        if bound is None:
            bound = self.bound[values] = PendingObservations([m.labels(*values) for m in self.members], self.unit)
        return bound

    def fold(self) -> None:
        for bound in self.bound.values():
            bound.fold()


def _bound_text(bound: float) -> str:
    return repr(float(bound))


class Families(Collector):
    """A collector of families: what a registry asks for at scrape time."""

    def __init__(self) -> None:
        self.members: list[CounterFamily | HistogramFamily] = []
        self.groups: list[HistogramGroup] = []

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> CounterFamily:
        family = CounterFamily(name, documentation, labelnames)
        self.members.append(family)
        return family

    def histogram(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                  bounds: Sequence[float] = MILLISECOND_BUCKETS) -> HistogramFamily:
        family = HistogramFamily(name, documentation, labelnames, bounds)
        self.members.append(family)
        return family

    def histogram_group(self, members: Sequence[HistogramFamily], unit: float = 1.0) -> HistogramGroup:
        """Members (created by `histogram`) observed together; their waiting values are counted on collection."""
        group = HistogramGroup(members, unit)
        self.groups.append(group)
        return group

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        for group in self.groups:
            group.fold()
        for member in self.members:
            yield member.family()


def gauge(name: str, documentation: str, labelnames: Sequence[str] = (),
          values: Sequence[tuple[Sequence[str], float]] = ()) -> GaugeMetricFamily:
    """A gauge family computed at scrape time (custom collectors use this)."""
    metric = GaugeMetricFamily(name, documentation, labels=labelnames)
    for labels, value in values:
        metric.add_metric(list(labels), value)
    return metric
