"""A request's time through the broker, split as Kafka's RequestMetrics split it, and slow-request logs.

Kafka's split, in the listener's terms (perf_counter seconds, one `RequestClock` per request):

- request queue: from the whole request having been read to its handler starting (a connection
  handles one request at a time, so this is the wait for the requests before it on the connection);
- local: the handler's own work (for Produce, the appends);
- remote: waiting on others: a Produce with acks=all for the followers, a Fetch for min_bytes to
  arrive (its long poll); the Fetch handler adds its wait through `current_request_clock`;
- response queue: from the response being ready to its write starting (pipelined produce
  responses wait for the ones before them);
- response send: writing the response to the socket;
- throttle: how long the connection is muted after the response for a quota (KIP-219); it comes
  after the response, so it is not part of the total, as in Kafka where the channel is muted after
  the send.

Total is received -> sent. A request whose total is at least `floe.request.slow.ms` is logged once,
at WARNING, with its API, version, client id, principal, listener and the split.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

log = logging.getLogger("floe.request.slow")

_CURRENT: ContextVar[RequestClock | None] = ContextVar("floe_request_clock", default=None)


class RequestClock:
    """When one request reached each stage (perf_counter seconds), and the remote wait inside its handler.

    The listener makes one per timed request and stamps it as the request goes; the clock also carries
    what reporting it needs, so a request makes no other object for its metrics: ``metrics`` (the
    bound RequestMetrics it reports to, an opaque object here) and ``request`` (its header, for the
    slow-request log).
    """

    __slots__ = ("received", "started", "local_done", "ready", "send_started", "sent", "remote_s", "metrics",
                 "request")

    def __init__(self, received: float, metrics: Any = None, request: Any = None) -> None:
        self.received = self.started = self.ready = self.send_started = self.sent = received
        self.local_done: float | None = None  # Produce: its appends done, before waiting for acks
        self.remote_s = 0.0
        self.metrics = metrics
        self.request = request

    def bind(self) -> None:
        """Make this the clock that `current_request_clock` answers in the running task."""
        _CURRENT.set(self)

    def split_ms(self) -> tuple[float, float, float, float, float, float]:
        """(total, request queue, local, remote, response queue, response send) in milliseconds.

        Remote is what the handler reported (`remote_s`), plus for a Produce the span from its appends
        to its response being ready (the wait for acks=all). `BrokerMetrics.request_done`, which runs
        once per request, computes the same split inline, in seconds.
        """
        handling = self.ready - self.started
        waited = self.remote_s if self.local_done is None else self.remote_s + self.ready - self.local_done
        remote = min(handling, max(0.0, waited))
        return ((self.sent - self.received) * 1000.0, (self.started - self.received) * 1000.0,
                (handling - remote) * 1000.0, remote * 1000.0, (self.send_started - self.ready) * 1000.0,
                (self.sent - self.send_started) * 1000.0)


def current_request_clock() -> RequestClock | None:
    """The clock of the request the running task handles (None outside the listener, or with metrics off)."""
    return _CURRENT.get()


def log_slow_request(api: str, version: int, client_id: str | None, principal: str, listener: str,
                     split: tuple[float, float, float, float, float, float], throttle_ms: float) -> None:
    total, queue, local, remote, response_queue, send = split
    log.warning("slow request %s v%d from client %r principal %s on listener %s: total %.1f ms (request queue "
                "%.1f, local %.1f, remote %.1f, response queue %.1f, response send %.1f; throttle after it %.1f)",
                api, version, client_id, principal, listener or "PLAINTEXT", total, queue, local, remote,
                response_queue, send, throttle_ms)
