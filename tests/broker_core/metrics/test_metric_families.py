"""The broker's metric families, request timing, slow-request log and endpoint, without a broker."""

from __future__ import annotations

import asyncio
import logging
import random
from types import SimpleNamespace

import pytest

from broker_core.metrics.broker import NULL_REQUEST, NULL_TOPIC, BrokerMetrics, kafka_request_name
from broker_core.metrics.endpoint import MetricsEndpoint
from broker_core.metrics.families import FOLD_AFTER_EVENTS, CounterFamily, Families, HistogramFamily
from broker_core.metrics.requests import RequestClock
from broker_core.metrics.scrape import parse


def test_a_histogram_counts_each_value_into_the_first_bucket_that_holds_it_and_exposes_cumulative_counts() -> None:
    families = Families()
    histogram = families.histogram("t_ms", "doc", ("request",), bounds=(1.0, 10.0))
    child = histogram.labels("Produce")
    for value in (0.5, 1.0, 3.0, 10.0, 50.0):
        child.observe(value)
    samples = {(s.name, s.labels.get("le")): s.value for s in histogram.family().samples}
    assert samples[("t_ms_bucket", "1.0")] == 2
    assert samples[("t_ms_bucket", "10.0")] == 4
    assert samples[("t_ms_bucket", "+Inf")] == 5
    assert samples[("t_ms_count", None)] == 5
    assert samples[("t_ms_sum", None)] == 64.5


def test_a_histogram_group_counts_every_event_into_the_buckets_observe_would_choose() -> None:
    """Values wait raw and are counted in bulk (when FOLD_AFTER_EVENTS wait, and at collection); the
    counts are those of observing each value, whether a collection comes between events or not."""
    bounds = (0.5, 1.0, 2.5, 5.0, 10.0)
    families = Families()
    grouped = [families.histogram(f"g{i}_ms", "doc", ("request",), bounds) for i in range(3)]
    group = families.histogram_group(grouped, unit=1000.0)  # observed in seconds
    reference = [HistogramFamily(f"g{i}_ms", "doc", ("request",), bounds).labels("Produce") for i in range(3)]
    produce = group.labels("Produce")
    assert group.labels("Produce") is produce
    rng = random.Random(7)
    events = FOLD_AFTER_EVENTS * 2 + 333
    for number in range(events):
        # milliseconds a little off the bounds, to 4 ms past the last one, and some zeros
        values_ms = [rng.choice((0.0, rng.uniform(0.0, 14.0), rng.choice(bounds) + 0.001)) for _ in range(3)]
        produce.observe(*(v / 1000.0 for v in values_ms))
        for child, value in zip(reference, values_ms, strict=True):
            child.observe(value)
        if number == FOLD_AFTER_EVENTS + 10:
            list(families.collect())  # a scrape between folds
    collected = {m.name: m for m in families.collect()}
    for i, child in enumerate(reference):
        samples = {s.labels["le"]: s.value for s in collected[f"g{i}_ms"].samples if s.name.endswith("_bucket")}
        expected = {s.labels["le"]: s.value for s in _holding(f"g{i}_ms", bounds, child).family().samples
                    if s.name.endswith("_bucket")}
        assert samples == expected
        assert samples["+Inf"] == events
        count_sum = {s.name: s.value for s in collected[f"g{i}_ms"].samples if not s.name.endswith("_bucket")}
        assert count_sum[f"g{i}_ms_count"] == events
        assert count_sum[f"g{i}_ms_sum"] == pytest.approx(child.sum)


def test_an_event_with_too_few_or_too_many_values_is_refused_and_nothing_of_it_waits() -> None:
    families = Families()
    group = families.histogram_group([families.histogram(f"w{i}_ms", "doc", ("request",), (1.0,)) for i in range(2)])
    pending = group.labels("Produce")
    pending.observe(0.5, 2.0)
    for wrong in ((0.5,), (0.5, 0.5, 0.5)):
        with pytest.raises(ValueError, match="values for a group of 2"):
            pending.observe(*wrong)
    assert pending.used == 2
    counts = {(m.name, s.labels["le"]): s.value for m in families.collect() for s in m.samples
              if s.name.endswith("_bucket")}
    assert counts == {("w0_ms", "1.0"): 1, ("w0_ms", "+Inf"): 1, ("w1_ms", "1.0"): 0, ("w1_ms", "+Inf"): 1}


def _holding(name: str, bounds: tuple[float, ...], child: object) -> HistogramFamily:
    family = HistogramFamily(name, "doc", ("request",), bounds)
    family.children[("Produce",)] = child
    return family


def test_every_timed_request_is_counted_exactly_in_the_request_count_and_each_time_histogram() -> None:
    metrics = BrokerMetrics()
    produce = metrics.request(0, 9, lambda key: "produce")
    requests = FOLD_AFTER_EVENTS + 500
    for number in range(requests):
        clock = RequestClock(number, produce, header("c", "User:ANONYMOUS"))
        clock.started = number + 0.0002
        clock.local_done = number + 0.0012
        clock.ready = number + 0.0032  # 2 ms waiting for acks=all
        clock.send_started, clock.sent = number + 0.0033, number + 0.0035
        metrics.request_done(clock, 0.0, "PLAINTEXT")
        if number == 100:
            assert parse("test", metrics.exposition().decode()).value(
                "kafka_network_requestmetrics_totaltimems_count", request="Produce") == 101
    scraped = parse("test", metrics.exposition().decode())
    assert scraped.value("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == requests
    for name in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "throttletimems",
                 "responsequeuetimems", "responsesendtimems"):
        assert scraped.value(f"kafka_network_requestmetrics_{name}_count", request="Produce") == requests
    remote = {s.labels["le"]: s.value for s in scraped.series("kafka_network_requestmetrics_remotetimems_bucket")}
    assert (remote["1.0"], remote["2.5"]) == (0, requests)  # each waited 2 ms
    assert scraped.value("kafka_network_requestmetrics_totaltimems_sum", request="Produce") == pytest.approx(
        3.5 * requests, rel=1e-6)


def test_a_counter_child_is_bound_once_and_a_wrong_label_count_is_refused() -> None:
    counter = CounterFamily("c", "doc", ("topic",))
    assert counter.labels("a") is counter.labels("a")
    counter.labels("a").inc(3)
    assert [(s.name, s.value) for s in counter.family().samples] == [("c_total", 3.0)]
    with pytest.raises(ValueError):
        counter.labels("a", "b")
    with pytest.raises(ValueError):
        HistogramFamily("h", "doc", ("x",)).labels()


def test_kafka_request_names_are_kafkas_with_fetch_split_by_who_fetches() -> None:
    assert kafka_request_name("api_versions") == "ApiVersions"
    assert kafka_request_name("produce") == "Produce"
    assert kafka_request_name("fetch") == "FetchConsumer"
    assert kafka_request_name("fetch", follower=True) == "FetchFollower"
    assert kafka_request_name("describe_client_quotas") == "DescribeClientQuotas"


def test_the_time_split_of_a_produce_puts_the_wait_for_acks_in_remote_time() -> None:
    clock = RequestClock(10.000)
    clock.started = 10.002  # 2 ms behind earlier requests
    clock.local_done = 10.005  # 3 ms appending
    clock.ready = 10.025  # 20 ms waiting for the followers
    clock.send_started = 10.026
    clock.sent = 10.027
    total, queue, local, remote, response_queue, send = clock.split_ms()
    assert total == pytest.approx(27)
    assert (queue, local, remote, response_queue, send) == pytest.approx((2, 3, 20, 1, 1))


def test_a_fetch_long_poll_reported_by_its_handler_is_remote_time() -> None:
    clock = RequestClock(0.0)
    clock.started, clock.ready, clock.send_started, clock.sent = 0.0, 0.5, 0.5, 0.5
    clock.remote_s = 0.45
    _, _, local, remote, _, _ = clock.split_ms()
    assert (local, remote) == pytest.approx((50, 450))


def test_metrics_off_hand_out_null_children_and_keep_nothing() -> None:
    metrics = BrokerMetrics(enabled=False)
    assert metrics.topic("t") is NULL_TOPIC
    assert metrics.request(0, 9, lambda key: "produce") is NULL_REQUEST
    metrics.topic("t").messages_in.inc(5)
    assert "kafka_server_brokertopicmetrics_messagesin_total{" not in metrics.exposition().decode()


def header(client_id: str, principal: str) -> SimpleNamespace:
    """What the slow-request log reads of a request's header."""
    return SimpleNamespace(client_id=client_id, principal=principal)


def test_a_request_at_or_over_the_slow_threshold_is_counted_and_logged_once_with_its_split(
        caplog: pytest.LogCaptureFixture) -> None:
    metrics = BrokerMetrics(slow_request_ms=100)
    bound = metrics.request(3, 12, lambda key: "metadata")
    fast = RequestClock(0.0, bound, header("client-a", "User:alice"))
    slow = RequestClock(0.0, bound, header("client-b", "User:bob"))
    fast.started = fast.ready = fast.send_started = fast.sent = 0.010
    slow.started, slow.ready, slow.send_started, slow.sent = 0.1, 0.2, 0.2, 0.25
    with caplog.at_level(logging.WARNING, logger="floe.request.slow"):
        metrics.request_done(fast, 0.0, "PLAINTEXT")
        metrics.request_done(slow, 0.5, "PLAINTEXT")
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    for part in ("Metadata v12", "'client-b'", "User:bob", "total 250.0 ms", "request queue 100.0", "local 100.0",
                 "response send 50.0", "throttle after it 500.0"):
        assert part in message
    scraped = parse("test", metrics.exposition().decode())
    assert scraped.value("floe_request_slow_total", request="Metadata") == 1
    assert scraped.value("kafka_network_requestmetrics_requests_total", request="Metadata", version="12") == 2
    assert scraped.value("kafka_network_requestmetrics_throttletimems_sum", request="Metadata") == 500


def test_quota_use_is_counted_in_bytes_for_byte_rates_and_throttle_time_for_every_quota() -> None:
    metrics = BrokerMetrics()
    metrics.quota_recorded("producer_byte_rate", ("alice", ""), 1000, 0.0)
    metrics.quota_recorded("producer_byte_rate", ("alice", ""), 500, 0.25)
    metrics.quota_recorded("request_percentage", ("", "app"), 12.5, 0.1)
    scraped = parse("test", metrics.exposition().decode())
    labels = {"quota": "producer_byte_rate", "user": "alice", "client_id": ""}
    assert scraped.value("floe_quota_bytes_total", **labels) == 1500
    assert scraped.value("floe_quota_throttle_time_seconds_total", **labels) == 0.25
    assert scraped.value("floe_quota_throttled_responses_total", **labels) == 1
    assert scraped.value("floe_quota_throttle_time_seconds_total", quota="request_percentage", user="",
                         client_id="app") == 0.1
    assert not any(scraped.series("floe_quota_bytes_total", quota="request_percentage"))


def test_a_deleted_topic_stops_being_reported() -> None:
    metrics = BrokerMetrics()
    metrics.topic("gone").messages_in.inc(3)
    metrics.topic("kept").messages_in.inc(4)
    metrics.forget_topics_except({"kept"})
    exposition = metrics.exposition().decode()
    assert 'topic="gone"' not in exposition
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="kept"} 4.0' in exposition


def test_the_endpoint_serves_the_exposition_on_get_and_refuses_other_paths_and_methods() -> None:
    metrics = BrokerMetrics()
    metrics.topic("served").messages_in.inc(7)

    async def exchange(port: int, request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        answer = await reader.read()
        writer.close()
        return answer

    async def run() -> list[bytes]:
        endpoint = MetricsEndpoint(metrics.collect, "127.0.0.1", 0)
        port = await endpoint.start()
        try:
            return [await exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                    await exchange(port, b"GET /other HTTP/1.1\r\n\r\n"),
                    await exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n"),
                    await exchange(port, b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n")]
        finally:
            await endpoint.stop()

    ok, missing, post, oversized = asyncio.run(run())
    head, _, body = ok.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert parse("test", body.decode()).value("kafka_server_brokertopicmetrics_messagesin_total", topic="served") == 7
    assert missing.startswith(b"HTTP/1.1 404")
    assert post.startswith(b"HTTP/1.1 405")
    assert oversized == b""  # closed without an answer


def test_with_metrics_off_the_slow_request_log_still_times_requests(caplog: pytest.LogCaptureFixture) -> None:
    metrics = BrokerMetrics(enabled=False, slow_request_ms=0)
    bound = metrics.request(1, 12, lambda key: "fetch")
    assert bound is not NULL_REQUEST
    clock = RequestClock(0.0, bound, header("c", "User:ANONYMOUS"))
    with caplog.at_level(logging.WARNING, logger="floe.request.slow"):
        metrics.request_done(clock, 0.0, "PLAINTEXT")
    assert "slow request FetchConsumer v12" in caplog.text
