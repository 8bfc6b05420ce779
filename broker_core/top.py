"""`floe top`: a live view of the cluster from the brokers' metrics endpoints.

Every ``--interval`` seconds it scrapes each broker's metrics URL (``--metrics-url``, repeatable, else
the stack's stack.json) and shows per topic the records and bytes in per second, the bytes out per
second (rates between two scrapes, summed over the brokers: each partition is counted by its leader),
the partitions led and under-replicated, and the lag of the consumer groups reading it (the sum in
offsets and the largest time lag, as their coordinators report them); above the table, the brokers
that answered, the active controller and the offline partitions. ``--once`` prints one table (after
two scrapes) and exits, for scripts.

`topic_rows` is the sans-I/O part: two rounds of scrapes in, rows out.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from broker_core.local_stack import DEFAULT_DIR, StackError, stack_metrics_urls
from broker_core.metrics.scrape import Scrape, ScrapeError, scrape

_RATES = (("records_in", "kafka_server_brokertopicmetrics_messagesin_total"),
          ("bytes_in", "kafka_server_brokertopicmetrics_bytesin_total"),
          ("bytes_out", "kafka_server_brokertopicmetrics_bytesout_total"))


@dataclass(frozen=True)
class TopicRow:
    topic: str
    records_in_per_s: float
    bytes_in_per_s: float
    bytes_out_per_s: float
    partitions_led: int
    under_replicated: int
    consumer_lag: int
    max_lag_seconds: float | None


def _by_topic(scrapes: Sequence[Scrape], name: str) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for scraped in scrapes:
        for sample in scraped.series(name):
            if "topic" in sample.labels:
                totals[sample.labels["topic"]] += sample.value
    return totals


def topic_rows(previous: Sequence[Scrape], current: Sequence[Scrape], elapsed_s: float) -> list[TopicRow]:
    """Per topic, rates between two rounds of scrapes ``elapsed_s`` apart and the gauges of the latest round."""
    rates: dict[str, dict[str, float]] = {}
    for field, name in _RATES:
        before, now = _by_topic(previous, name), _by_topic(current, name)
        rates[field] = {topic: max(0.0, value - before.get(topic, 0.0)) / elapsed_s for topic, value in now.items()}
    led: dict[str, int] = defaultdict(int)
    under: dict[str, int] = defaultdict(int)
    lag: dict[str, int] = defaultdict(int)
    lag_seconds: dict[str, float] = {}
    for scraped in current:
        for sample in scraped.series("kafka_cluster_partition_underreplicated"):
            led[sample.labels["topic"]] += 1
            under[sample.labels["topic"]] += int(sample.value)
        for sample in scraped.series("kafka_consumergroup_lag"):
            lag[sample.labels["topic"]] += int(sample.value)
        for sample in scraped.series("kafka_consumergroup_lag_seconds"):
            topic = sample.labels["topic"]
            lag_seconds[topic] = max(lag_seconds.get(topic, 0.0), sample.value)
    topics = sorted(set(rates["records_in"]) | set(led) | set(lag))
    return [TopicRow(topic, rates["records_in"].get(topic, 0.0), rates["bytes_in"].get(topic, 0.0),
                     rates["bytes_out"].get(topic, 0.0), led[topic], under[topic], lag[topic], lag_seconds.get(topic))
            for topic in topics]


def _scrape_all(urls: Sequence[str]) -> tuple[list[Scrape], list[str]]:
    scrapes, failures = [], []
    for url in urls:
        try:
            scrapes.append(scrape(url))
        except ScrapeError as exc:
            failures.append(str(exc))
    return scrapes, failures


def _bytes(rate: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if rate < 1024 or unit == "GiB":
            return f"{rate:,.1f} {unit}/s"
        rate /= 1024
    return f"{rate:,.1f} GiB/s"


def render(urls: Sequence[str], current: Sequence[Scrape], failures: Sequence[str], rows: Sequence[TopicRow]) -> Group:
    controllers = [s.url for s in current if s.value("kafka_controller_kafkacontroller_activecontrollercount") == 1]
    offline = sum(s.value("kafka_controller_kafkacontroller_offlinepartitionscount") or 0 for s in current)
    urp = sum(s.value("kafka_server_replicamanager_underreplicatedpartitions") or 0 for s in current)
    header = Text(f"brokers answering {len(current)}/{len(urls)}   controller {controllers[0] if controllers else '-'}   "
                  f"offline partitions {offline:.0f}   under-replicated {urp:.0f}")
    table = Table("topic", "records in/s", "bytes in/s", "bytes out/s", "led", "URP", "consumer lag", "max lag (s)")
    for row in rows:
        table.add_row(row.topic, f"{row.records_in_per_s:,.0f}", _bytes(row.bytes_in_per_s), _bytes(row.bytes_out_per_s),
                      str(row.partitions_led), Text(str(row.under_replicated), style="red" if row.under_replicated else ""),
                      f"{row.consumer_lag:,}", "-" if row.max_lag_seconds is None else f"{row.max_lag_seconds:.1f}")
    return Group(header, table, *(Text(f"no answer: {failure}", style="yellow") for failure in failures))


def add_top_command(commands: argparse._SubParsersAction) -> None:
    top = commands.add_parser("top", help="live throughput, lag and under-replicated partitions per topic")
    top.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                     help="a broker's metrics endpoint (repeatable; default: the stack's brokers)")
    top.add_argument("--stack", type=Path, default=DEFAULT_DIR, help="the local stack's directory")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes (default 2)")
    top.add_argument("--once", action="store_true", help="print one table after two scrapes and exit")
    top.set_defaults(func=run_top)


def run_top(args: argparse.Namespace) -> int:
    urls = list(args.metrics_url)
    if not urls:
        try:
            urls = stack_metrics_urls(args.stack)
        except StackError as exc:
            print(f"floe top: {exc}", file=sys.stderr)
            return 1
    if not urls:
        print("floe top: no metrics URL: give --metrics-url, or start the stack with metrics on", file=sys.stderr)
        return 1
    if args.interval <= 0:
        print("floe top: --interval must be positive", file=sys.stderr)
        return 2
    console = Console(width=None if sys.stdout.isatty() else 160)  # piped: wide enough for whole topic names
    previous, _ = _scrape_all(urls)
    last = time.monotonic()
    if args.once:
        time.sleep(args.interval)
        current, failures = _scrape_all(urls)
        console.print(render(urls, current, failures, topic_rows(previous, current, time.monotonic() - last)))
        return 0 if current else 1
    try:
        with Live(Text("scraping..."), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(args.interval)
                current, failures = _scrape_all(urls)
                now = time.monotonic()
                live.update(render(urls, current, failures, topic_rows(previous, current, now - last)))
                if current:
                    previous, last = current, now
    except KeyboardInterrupt:
        return 0
