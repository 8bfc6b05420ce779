"""`floe local up` as a person runs it: a real process tree, stack.json, Ctrl-C, and a restart."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import psutil
import pytest
from confluent_kafka import Consumer

from broker_core.aws import AwsSettings
from broker_core.client import EARLIEST, LATEST, FloeClient
from broker_core.groups.models import GROUPS_TABLE
from broker_core.records.batch import SimpleRecord
from tests.support.waiting import wait_until

# floe local up and restarts, about 70 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults

_UP_TIMEOUT_S = 90


def _start_local_up(directory: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "broker_core.cli", "local", "up", "--data-dir", str(directory), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )


def _wait_for_stack_file(directory: Path, process: subprocess.Popen) -> dict:
    path = directory / "stack.json"

    def stack_file() -> dict | None:
        if path.exists():
            return json.loads(path.read_text())
        assert process.poll() is None, process.stderr.read().decode()
        return None

    return wait_until(stack_file, "floe local up writes stack.json", _UP_TIMEOUT_S, interval_s=0.2)


def _stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(timeout=60)


async def _produce_and_read(bootstrap: str, topic: str, create: bool) -> list[bytes]:
    async with FloeClient(bootstrap) as client:
        if create:
            await client.create_topic(topic, partitions=1, configs={"segment.bytes": "65536"})
            for chunk in range(4):
                records = [SimpleRecord(key=b"k", value=f"{chunk}-{i}".encode()) for i in range(500)]
                await client.produce(topic, records, 0)
        end, _ = await client.list_offsets(topic, 0, LATEST)
        start, _ = await client.list_offsets(topic, 0, EARLIEST)
        values: list[bytes] = []
        offset = start
        while offset < end:
            result = await client.fetch(topic, 0, offset, max_wait_ms=100)
            values += [r.value for r in result.records if r.offset >= offset]
            offset = result.next_offset
        return values


def _join_as_static_member(bootstrap: str, topic: str) -> None:
    """A consumer with a group.instance.id, assigned ``topic`` and closed: a static member stays in its group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "static-group", "group.instance.id": "static-0"})
    consumer.subscribe([topic])
    try:
        wait_until(lambda: consumer.poll(0.2) is not None or consumer.assignment(), "the static member assigned",
                   _UP_TIMEOUT_S, interval_s=0)
    finally:
        consumer.close()


def _stored_members(aws: dict) -> list[tuple[str, bytes]]:
    """(group.instance.id, assignment bytes) of every member of the static group, as DynamoDB holds them."""
    settings = AwsSettings.from_dict(aws)
    dynamodb = boto3.client("dynamodb", aws_access_key_id="floe-local", aws_secret_access_key="floe-local",
                            **settings.boto3_kwargs())
    item = dynamodb.get_item(TableName=settings.table_prefix + GROUPS_TABLE, Key={"group_id": {"S": "static-group"}},
                             ConsistentRead=True)["Item"]
    return [(m["M"]["group_instance_id"]["S"], m["M"]["assignment"]["B"]) for m in item["members"]["L"]]


def test_local_up_writes_stack_json_and_stops_every_process_on_interrupt(tmp_path: Path) -> None:
    process = _start_local_up(tmp_path, "--brokers", "2", "--set", "log.segment.bytes=1048576")
    info = _wait_for_stack_file(tmp_path, process)
    try:
        assert len(info["brokers"]) == 2
        assert info["bootstrap_servers"] == ",".join(f"{b['host']}:{b['port']}" for b in info["brokers"])
        assert set(info["aws"]) >= {"endpoint_url", "region", "bucket", "table_prefix"}
        pids = [b["pid"] for b in info["brokers"]] + [info["moto_pid"]]
        assert all(psutil.pid_exists(pid) for pid in pids)
        for broker in info["brokers"]:
            assert Path(broker["data_dir"]).is_dir()
        broker_cmdline = " ".join(psutil.Process(info["brokers"][0]["pid"]).cmdline())
        assert "log.segment.bytes=1048576" in broker_cmdline
    finally:
        assert _stop(process) == 0
    wait_until(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                               for pid in pids), "every process of the stack exits with floe local up", 10)


def test_restarting_local_up_on_the_same_directory_keeps_topics_and_records(tmp_path: Path) -> None:
    process = _start_local_up(tmp_path)
    info = _wait_for_stack_file(tmp_path, process)
    try:
        written = asyncio.run(_produce_and_read(info["bootstrap_servers"], "kept", create=True))
        # Group members carry binary attributes (protocol metadata, assignment): the saved state holds them too.
        _join_as_static_member(info["bootstrap_servers"], "kept")
        members = _stored_members(info["aws"])
    finally:
        assert _stop(process) == 0
    assert len(written) == 2000
    assert [instance for instance, _ in members] == ["static-0"] and members[0][1]
    (tmp_path / "stack.json").unlink()

    process = _start_local_up(tmp_path)
    info = _wait_for_stack_file(tmp_path, process)
    try:
        read_back = asyncio.run(_produce_and_read(info["bootstrap_servers"], "kept", create=False))
        members_back = _stored_members(info["aws"])
    finally:
        assert _stop(process) == 0
    assert read_back == written
    assert members_back == members


def test_local_up_refuses_a_malformed_setting(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker_core.cli", "local", "up", "--data-dir", str(tmp_path), "--set", "no-equals"],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )
    assert result.returncode == 2
    assert "key=value" in result.stderr
    assert not (tmp_path / "stack.json").exists()
