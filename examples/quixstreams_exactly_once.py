"""Count records per key, exactly once, with a stateful quixstreams application on Floe.

The application reads JSON records from an input topic, keeps a running count per key in a
RocksDB state store, and writes ``{"count": n, "seq": <the input's seq>}`` under the same key to an
output topic. With ``processing_guarantee="exactly-once"`` every checkpoint is one Kafka
transaction: the output records, the state store's changelog records (a compacted topic quixstreams
creates) and the consumer group's input offsets commit together or not at all. So after a crash
(SIGKILL) and even the loss of the local state directory, the restarted application restores its
counts from the changelog's committed records, resumes from the committed input offsets, and a
read_committed reader of the output sees each input record counted exactly once.

Each instance has a stable name, ``<group>-<instance>``, used as its transactional id and as its
static group membership (``group.instance.id``, KIP-345). So a restarted instance takes over from
its killed predecessor at once: its InitProducerId fences the old producer and aborts the
transaction it left open (rather than that transaction, and the last stable offset of every
partition it wrote, staying open until ``transaction.timeout.ms``), and it rejoins the group in
the old member's place (rather than waiting ``session.timeout.ms`` for the group to notice the
old member is gone). Run one process per instance name.

    python examples/quixstreams_exactly_once.py --bootstrap-servers 127.0.0.1:9092 \\
        --input clicks --output click-counts --state-dir ./state

SIGTERM or Ctrl-C stops it cleanly (the open checkpoint is committed first).
"""

from __future__ import annotations

import argparse
import logging

from quixstreams import Application
from quixstreams.state import State


def count(value: dict, state: State) -> dict:
    """The running count of the record's key, with the record's own sequence number."""
    total = state.get("count", 0) + 1
    state.set("count", total)
    return {"count": total, "seq": value["seq"]}


def build_application(bootstrap_servers: str, *, group: str, instance: str, input_topic: str,
                      output_topic: str, state_dir: str, commit_interval_s: float) -> Application:
    app = Application(
        broker_address=bootstrap_servers,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=commit_interval_s,
        state_dir=state_dir,
        producer_extra_config={"transactional.id": f"{group}-{instance}"},
        consumer_extra_config={"group.instance.id": f"{group}-{instance}"},
        loglevel=logging.INFO,
    )
    source = app.topic(input_topic, key_deserializer="str", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="str", value_serializer="json")
    app.dataframe(source).apply(count, stateful=True).to_topic(sink)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--group", default="click-counter", help="consumer group (also names the state)")
    parser.add_argument("--instance", default="0", help="this process's id within the group")
    parser.add_argument("--input", default="clicks")
    parser.add_argument("--output", default="click-counts")
    parser.add_argument("--state-dir", default="state")
    parser.add_argument("--commit-interval", type=float, default=1.0, help="seconds per transaction")
    args = parser.parse_args(argv)
    app = build_application(args.bootstrap_servers, group=args.group, instance=args.instance,
                            input_topic=args.input, output_topic=args.output, state_dir=args.state_dir,
                            commit_interval_s=args.commit_interval)
    app.run()


if __name__ == "__main__":
    main()
