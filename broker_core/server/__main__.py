"""Run one broker process: `python -m broker_core.server --broker-id 1 --port 9092 ...`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path

from broker_core.aws import AwsSettings
from broker_core.settings import broker_setting, parse_overrides

from .assembly import build_broker
from .config import BrokerConfig
from .log_format import configure_logging


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="floe-broker", description="Run one Floe broker node")
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--advertised-host", default=None)
    parser.add_argument("--rack", default=None)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--endpoint-url", default=os.environ.get("FLOE_AWS_ENDPOINT_URL"))
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    parser.add_argument("--bucket", default=os.environ.get("FLOE_BUCKET", "floe"))
    parser.add_argument("--table-prefix", default=os.environ.get("FLOE_TABLE_PREFIX", "floe-"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a Kafka broker config, e.g. log.segment.bytes=1048576")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="write {'port': N, 'pid': N, 'listeners': {NAME: N}, 'metrics_port': N or null} here once "
                             "the broker serves requests (port: the first listener's)")
    parser.add_argument("--log-level", default=os.environ.get("FLOE_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    config = BrokerConfig(
        broker_id=args.broker_id, host=args.host, port=args.port, data_dir=args.data_dir,
        aws=AwsSettings(endpoint_url=args.endpoint_url, region=args.region, bucket=args.bucket,
                        table_prefix=args.table_prefix),
        rack=args.rack, advertised_host=args.advertised_host, overrides=parse_overrides(args.overrides),
    )
    config.validate()
    broker = build_broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await broker.start()
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": broker.port, "pid": os.getpid(),
                                   "listeners": {name: port for name, (_, port) in broker.endpoints.items()},
                                   "metrics_port": broker.metrics_port}))
        tmp.rename(args.ready_file)
    await stop.wait()
    await broker.stop(controlled=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    overrides = parse_overrides(args.overrides)
    # --set wins; else FLOE_LOG_FORMAT (the broker image sets json); else the setting's default, text.
    log_format = overrides.get("floe.log.format") or os.environ.get("FLOE_LOG_FORMAT") or broker_setting(
        overrides, "floe.log.format")
    configure_logging(args.log_level, log_format)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(run(args))


def event_loop_factory():
    """uvloop where it is installed (Linux, macOS), the standard loop elsewhere."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    main()
