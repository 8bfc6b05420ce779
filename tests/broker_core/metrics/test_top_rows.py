"""`floe top`'s rows from two rounds of scrapes: rates summed over brokers, gauges of the latest round."""

from __future__ import annotations

import pytest

from broker_core.metrics.scrape import parse
from broker_core.top import topic_rows


def exposition(records_in: dict[str, float], under: dict[tuple[str, int], int], lag: dict[tuple[str, str, int], int],
               lag_s: dict[tuple[str, str, int], float]) -> str:
    lines = ["# TYPE kafka_server_brokertopicmetrics_messagesin counter"]
    lines += [f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{t}"}} {v}' for t, v in records_in.items()]
    lines += ["# TYPE kafka_cluster_partition_underreplicated gauge"]
    lines += [f'kafka_cluster_partition_underreplicated{{topic="{t}",partition="{p}"}} {v}' for (t, p), v in under.items()]
    lines += ["# TYPE kafka_consumergroup_lag gauge"]
    lines += [f'kafka_consumergroup_lag{{group="{g}",topic="{t}",partition="{p}"}} {v}' for (g, t, p), v in lag.items()]
    lines += ["# TYPE kafka_consumergroup_lag_seconds gauge"]
    lines += [f'kafka_consumergroup_lag_seconds{{group="{g}",topic="{t}",partition="{p}"}} {v}'
              for (g, t, p), v in lag_s.items()]
    return "\n".join(lines) + "\n"


def test_rates_are_summed_over_the_leaders_and_lag_over_groups_and_partitions() -> None:
    before = [parse("b1", exposition({"a": 100}, {}, {}, {})), parse("b2", exposition({"a": 50}, {}, {}, {}))]
    after = [parse("b1", exposition({"a": 300}, {("a", 0): 1}, {("g", "a", 0): 5}, {("g", "a", 0): 2.5})),
             parse("b2", exposition({"a": 150, "b": 10}, {("a", 1): 0, ("b", 0): 0},
                                    {("h", "a", 1): 7}, {("h", "a", 1): 9.0}))]
    rows = {row.topic: row for row in topic_rows(before, after, elapsed_s=2.0)}
    assert rows["a"].records_in_per_s == pytest.approx((300 + 150 - 100 - 50) / 2)
    assert rows["b"].records_in_per_s == pytest.approx(5)  # new since the previous round
    assert (rows["a"].partitions_led, rows["a"].under_replicated) == (2, 1)
    assert (rows["a"].consumer_lag, rows["a"].max_lag_seconds) == (12, 9.0)
    assert rows["b"].max_lag_seconds is None
