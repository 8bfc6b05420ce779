"""`floe groups list|describe` against a running stack: members, assignment, offsets and lag."""

from __future__ import annotations

import io
import json
import struct

import pytest
from confluent_kafka import Producer
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.serial import entity_writer

from broker_core.cli import main
from broker_core.groups.admin import GroupAdmin


def assignment_bytes(topic: str, partitions: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 0))
    entity_writer(ConsumerProtocolAssignment)(
        buffer, ConsumerProtocolAssignment(assigned_partitions=(TopicPartition(topic=topic, partitions=partitions),),
                                           user_data=None))
    return buffer.getvalue()


@pytest.fixture
def group_with_lag(group_stack, group_topic, members) -> tuple[str, str, int]:
    """A group whose member owns partitions 1 and 2 and committed 2 records short of partition 1's end."""
    with GroupAdmin(group_stack.bootstrap_servers) as admin:
        admin.refresh_metadata()
        start = admin.log_end_offsets([(group_topic, 1)])[(group_topic, 1)]
    producer = Producer({"bootstrap.servers": group_stack.bootstrap_servers})
    for i in range(5):
        producer.produce(group_topic, value=str(i).encode(), partition=1)
    assert producer.flush(30) == 0
    member = members()
    assert member.join().error_code == 0
    assert member.sync({member.member_id: assignment_bytes(group_topic, (1, 2))}).error_code == 0
    assert member.commit({(group_topic, 1): start + 2}) == {(group_topic, 1): 0}
    return member.group_id, member.member_id, start


def test_describe_shows_members_assignment_committed_and_log_end_offsets_and_lag(
        group_stack, group_topic, group_with_lag, capsys) -> None:
    group_id, member_id, start = group_with_lag
    code = main(["groups", "describe", group_id, "--bootstrap-servers", group_stack.bootstrap_servers,
                 "--format", "json"])
    assert code == 0
    described = json.loads(capsys.readouterr().out)
    assert described["state"] == "Stable"
    assert described["protocol"] == "range"
    assert [(m["member_id"], m["assignment"]) for m in described["members"]] == [
        (member_id, [[group_topic, 1], [group_topic, 2]])]
    rows = {p["partition"]: (p["committed_offset"], p["log_end_offset"], p["lag"], p["member_id"])
            for p in described["partitions"]}
    assert rows[1] == (start + 2, start + 5, 3, member_id)
    assert rows[2] == (-1, 0, None, member_id)


def test_describe_prints_a_table_with_the_lag(group_stack, group_topic, group_with_lag, capsys) -> None:
    group_id, member_id, start = group_with_lag
    servers = group_stack.bootstrap_servers
    assert main(["groups", "describe", group_id, "--bootstrap-servers", servers]) == 0
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    # No time lag: the cluster is named by --bootstrap-servers and no --metrics-url is given.
    assert [group_topic, "1", str(start + 2), str(start + 5), "3", "-", member_id] in rows


def test_list_shows_the_group_and_its_state(group_stack, group_with_lag, capsys) -> None:
    group_id, _, _ = group_with_lag
    assert main(["groups", "list", "--bootstrap-servers", group_stack.bootstrap_servers, "--format", "json"]) == 0
    listed = {g["group_id"]: g for g in json.loads(capsys.readouterr().out)}
    assert listed[group_id] == {"group_id": group_id, "protocol_type": "consumer", "state": "Stable"}


def test_describe_without_a_reachable_cluster_fails_with_a_message(capsys) -> None:
    assert main(["groups", "describe", "g", "--bootstrap-servers", "127.0.0.1:1"]) == 1
    assert "floe groups describe" in capsys.readouterr().err
