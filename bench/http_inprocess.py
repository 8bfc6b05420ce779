"""The HTTP front end's produce handler in this process: CPU per warm request, or a profile of it.

One local stack (moto, one broker, no HTTP adapter); the handler (`functions.app.lambda_handler`)
is called in this process with the API Gateway events the local adapter would build, for the bench's
500-record bodies (`bench/http_bench.py`), one after the other, after 10 warm-up requests. ``time``
prints the wall and CPU time per request, ``cprofile`` and ``pyinstrument`` a profile of the same
requests. Neither HTTP nor the adapter is in these figures: `bench/http_adapter_cost.py` times those.
``pieces`` needs no stack: it times the per-request pieces alone on one body (CPU, best of five
rounds): reading the body with pydantic (json.loads, validation, the records' bytes) and with
`functions.produce_body`, murmur2 key by key and `functions.partitioning`, `build_batch` and
`functions.record_encoding`.

    .venv/bin/python bench/http_inprocess.py time --requests 200
    .venv/bin/python bench/http_inprocess.py cprofile --requests 100
    .venv/bin/python bench/http_inprocess.py pieces
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_bench import BROKER_OVERRIDES, RECORDS_PER_REQUEST, create_topics, http_body  # noqa: E402
from broker_core.local_stack import LocalStack, properties_text, write_private  # noqa: E402

WARM_UP = 10


def pieces() -> None:
    import json

    from pydantic import TypeAdapter

    from broker_core.partitioner import partition_for_key
    from broker_core.records import SimpleRecord, build_batch
    from functions.models import ProduceBody
    from functions.partitioning import partitions_for_keys
    from functions.produce import record_fields
    from functions.produce_body import decode_records
    from functions.record_encoding import encode_batch

    body = http_body(0).decode()
    adapter = TypeAdapter(ProduceBody)
    records = decode_records(body)
    assert records is not None
    keys = [key for _, key, _, _, _ in records]
    parts = [(key, value, (), 1_795_807_200_391) for _, key, value, _, _ in records]
    simple = [SimpleRecord(key=key, value=value, timestamp=timestamp) for key, value, _, timestamp in parts]

    def cpu_ms(work: object, rounds: int = 5, calls: int = 100) -> float:
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(calls):
                work()  # type: ignore[operator]
            best = min(best, (time.process_time() - started) / calls * 1000)
        return best

    timings = {
        "json.loads + pydantic + records' bytes": lambda: [
            record_fields(record) for record in adapter.validate_python(json.loads(body)).records],
        "functions.produce_body.decode_records": lambda: decode_records(body),
        "murmur2 key by key": lambda: [partition_for_key(key, 6) for key in keys],
        "functions.partitioning.partitions_for_keys": lambda: partitions_for_keys(keys, 6),
        "build_batch of SimpleRecords": lambda: build_batch(simple),
        "functions.record_encoding.encode_batch": lambda: encode_batch(parts),
    }
    for name, work in timings.items():
        print(f"{name}: {cpu_ms(work):.3f} ms CPU per {RECORDS_PER_REQUEST}-record body")
    print(f"load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("time", "cprofile", "pyinstrument", "pieces"))
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    if args.mode == "pieces":
        pieces()
        return
    with tempfile.TemporaryDirectory(prefix="floe-http-inprocess-") as directory:
        stack = LocalStack(directory=Path(directory), brokers=1, overrides=BROKER_OVERRIDES)
        stack.start()
        try:
            properties = write_private(Path(directory) / "client.properties",
                                       properties_text(stack.client_config).encode())
            os.environ.update({
                "FLOE_BOOTSTRAP_SERVERS": stack.bootstrap_servers, "FLOE_CLIENT_PROPERTIES_FILE": str(properties),
                "FLOE_AWS_ENDPOINT_URL": stack.aws.endpoint_url or "", "AWS_REGION": stack.region,
                "FLOE_BUCKET": stack.bucket, "FLOE_TABLE_PREFIX": stack.table_prefix,
                "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true",
                "POWERTOOLS_LOG_LEVEL": "WARNING",
            })
            from functions import runtime, tables
            from functions.app import lambda_handler
            from functions.local_adapter import LOCAL_CALLER_ARN, LocalLambdaContext, api_gateway_event

            tables.ensure_tables(runtime.settings().aws)
            asyncio.run(create_topics(stack.bootstrap_servers, ["inprocess"]))
            bodies = [http_body(n * RECORDS_PER_REQUEST) for n in range(WARM_UP + args.requests)]

            def call(body: bytes) -> None:
                event = api_gateway_event("POST", "/v1/topics/inprocess/records",
                                          [("content-type", "application/json")], body, caller_arn=LOCAL_CALLER_ARN)
                answer = lambda_handler(event, LocalLambdaContext(aws_request_id="inprocess", region=stack.region))
                if answer["statusCode"] != 200:
                    raise RuntimeError(f"produce answered {answer['statusCode']}: {answer['body'][:300]}")

            for body in bodies[:WARM_UP]:
                call(body)
            measured = bodies[WARM_UP:]
            wall, cpu = time.perf_counter(), time.process_time()
            latencies = []
            if args.mode == "cprofile":
                profile = cProfile.Profile()
                profile.enable()
                for body in measured:
                    call(body)
                profile.disable()
                stats = pstats.Stats(profile)
                stats.sort_stats("cumulative").print_stats(50)
                stats.sort_stats("tottime").print_stats(30)
            elif args.mode == "pyinstrument":
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.0005)
                profiler.start()
                for body in measured:
                    call(body)
                profiler.stop()
                print(profiler.output_text(unicode=False))
            else:
                for body in measured:
                    started = time.perf_counter()
                    call(body)
                    latencies.append(time.perf_counter() - started)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            p50 = f", p50 {statistics.median(latencies) * 1000:.2f} ms" if latencies else ""
            print(f"{len(measured)} warm requests of {RECORDS_PER_REQUEST} records: wall {wall / len(measured) * 1000:.2f} ms, "
                  f"CPU {cpu / len(measured) * 1000:.2f} ms per request{p50}; load average {os.getloadavg()[0]:.2f}")
        finally:
            stack.stop(save_state=False)


if __name__ == "__main__":
    main()
