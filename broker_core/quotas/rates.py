"""Kafka's quota measurements: a rate over sampled windows, and the token bucket of KIP-599.

`SampledRate` is Kafka's `Rate` over a `SampledStat`: ``samples`` windows of ``window_s`` each; a
value is added to the current window, a window older than the whole span is forgotten, and the rate
is the sum of the live windows divided by the time they cover, counted as at least ``samples - 1``
full windows (so a client's first burst is not measured over a few milliseconds). When a recorded
value takes the rate above the quota, the throttle is Kafka's: ``(rate - quota) / quota * span``,
the time the client must stay silent for the rate over the span to fall back to the quota, bounded
by ``max_throttle_s``.

`TokenBucket` is KIP-599's measure of controller mutations, which Floe also uses for producer bytes
(see `manager`) and the replication throttles (`replication`): it holds up to ``quota * samples *
window_s`` tokens (the burst), refills at ``quota`` per second, and a recorded value takes its count
of tokens, which may go negative; while it is negative the quota is exceeded and the throttle is the
time to refill to zero.

Times are seconds on the caller's monotonic clock, passed in, so tests need no sleeping. Not thread
safe: a broker uses them from its event loop only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """Kafka's `quota.window.num` samples of `quota.window.size.seconds` each."""

    samples: int = 11
    window_s: float = 1.0

    @property
    def span_s(self) -> float:
        return self.samples * self.window_s


class SampledRate:
    """A rate per second over sampled windows (Kafka's Rate + SampledStat); see the module doc."""

    __slots__ = ("config", "_starts", "_values", "_current", "last_record_s")

    def __init__(self, config: WindowConfig, now_s: float) -> None:
        self.config = config
        self._starts = [now_s]
        self._values = [0.0]
        self._current = 0
        self.last_record_s = now_s

    def record(self, value: float, now_s: float) -> None:
        self.last_record_s = now_s
        if now_s - self._starts[self._current] >= self.config.window_s:
            self._advance(now_s)
        self._values[self._current] += value

    def _advance(self, now_s: float) -> None:
        self._current = (self._current + 1) % self.config.samples
        if self._current >= len(self._starts):
            self._starts.append(now_s)
            self._values.append(0.0)
        else:
            self._starts[self._current] = now_s
            self._values[self._current] = 0.0

    def _purge(self, now_s: float) -> None:
        span = self.config.span_s
        for i, start in enumerate(self._starts):
            if now_s - start >= span:
                self._starts[i] = now_s
                self._values[i] = 0.0

    def window_s(self, now_s: float) -> float:
        """The time the rate is measured over: since the oldest live window, at least samples-1 windows."""
        self._purge(now_s)
        elapsed = now_s - min(self._starts)
        full = int(elapsed / self.config.window_s)
        minimum = self.config.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.config.window_s
        return max(elapsed, 0.001)

    def measure(self, now_s: float) -> float:
        window = self.window_s(now_s)
        return sum(self._values) / window

    def throttle_s(self, quota: float, now_s: float, max_throttle_s: float) -> float:
        """How long the client must wait for the rate to fall back to ``quota``; 0 when within it."""
        window = self.window_s(now_s)
        rate = sum(self._values) / window
        if rate <= quota:
            return 0.0
        return min((rate - quota) / quota * window, max_throttle_s)


class TokenBucket:
    """KIP-599's token bucket (see the module doc)."""

    __slots__ = ("config", "tokens", "_updated_s", "last_record_s")

    def __init__(self, config: WindowConfig, quota: float, now_s: float) -> None:
        self.config = config
        self.tokens = quota * config.span_s
        self._updated_s = now_s
        self.last_record_s = now_s

    def _refill(self, quota: float, now_s: float) -> None:
        burst = quota * self.config.span_s
        self.tokens = min(burst, self.tokens + quota * max(now_s - self._updated_s, 0.0))
        self._updated_s = now_s

    def available(self, quota: float, now_s: float) -> float:
        """The tokens in the bucket now (negative while a debt is being paid back)."""
        self._refill(quota, now_s)
        return self.tokens

    def exceeded(self, quota: float, now_s: float) -> bool:
        self._refill(quota, now_s)
        return self.tokens < 0

    def record(self, value: float, quota: float, now_s: float) -> None:
        self._refill(quota, now_s)
        self.last_record_s = now_s
        self.tokens -= value

    def throttle_s(self, quota: float, now_s: float) -> float:
        self._refill(quota, now_s)
        return -self.tokens / quota if self.tokens < 0 else 0.0
