"""The transaction coordinator over the wire: raw requests to a two-broker stack.

Each test drives the sequences a transactional producer sends (and the wrong ones it must be refused
for) and checks Kafka's error codes, the state DescribeTransactions reports, and the group offsets a
consumer reads back. The transaction's coordinator is taken on broker 1 and, where a group is
involved, the group's on broker 2, so the offsets' marker crosses brokers.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from broker_core.cli import main
from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

(NONE, NOT_COORDINATOR, INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE,
 INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT, UNKNOWN_TOPIC_OR_PARTITION, PRODUCER_FENCED,
 TRANSACTIONAL_ID_NOT_FOUND, UNSTABLE_OFFSET_COMMIT) = 0, 16, 47, 51, 48, 49, 50, 3, 90, 105, 88
TOPIC = "txn-coordinator-topic"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
                 "transaction.max.timeout.ms": "60000", "floe.transaction.marker.retry.backoff.ms": "100"}
    with running_stack(tmp_path_factory.mktemp("txn-stack"), brokers=2, overrides=overrides) as stack:
        MetadataStore(stack.aws).create_topic(TOPIC, 2, 1, {})
        for process in stack.processes.values():  # every broker has the topic in its metadata before a test asks
            with contextlib.closing(BlockingConnection("127.0.0.1", process.port)) as connection:
                wait_until(lambda connection=connection: _knows_topic(connection), f"broker on {process.port} knows {TOPIC}",
                           timeout_s=30)
        yield stack


def _knows_topic(connection: BlockingConnection) -> bool:
    metadata = connection.request(ApiKey.METADATA, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                                                    "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False}, 12)
    return all(p.leader_id >= 0 for p in metadata.topics[0].partitions) and len(metadata.topics[0].partitions) == 2


@pytest.fixture
def broker1(stack: LocalStack) -> Iterator[BlockingConnection]:
    connection = BlockingConnection("127.0.0.1", stack.processes[1].port)
    yield connection
    connection.close()


@pytest.fixture
def broker2(stack: LocalStack) -> Iterator[BlockingConnection]:
    connection = BlockingConnection("127.0.0.1", stack.processes[2].port)
    yield connection
    connection.close()


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def find(connection: BlockingConnection, key: str, key_type: int) -> Any:
    answer = connection.request(ApiKey.FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": (key,)}, 4)
    return answer.coordinators[0]


def init(connection: BlockingConnection, txn: str, timeout_ms: int = 30000, version: int = 4,
         producer: tuple[int, int] = (-1, -1)) -> Any:
    return connection.request(ApiKey.INIT_PRODUCER_ID, {
        "transactional_id": txn, "transaction_timeout": ms(timeout_ms),
        "producer_id": producer[0], "producer_epoch": producer[1]}, version)


def init_until_ready(connection: BlockingConnection, txn: str, timeout_ms: int = 30000) -> tuple[int, int]:
    answers: list[Any] = []

    def ready() -> bool:
        answers.append(init(connection, txn, timeout_ms))
        return answers[-1].error_code == NONE

    wait_until(ready, timeout_s=20, what=f"InitProducerId for {txn}")
    return answers[-1].producer_id, answers[-1].producer_epoch


def add_partitions(connection: BlockingConnection, txn: str, producer: tuple[int, int],
                   partitions: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], int]:
    answer = connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
        "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in partitions.items()]}, version)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def verify(connection: BlockingConnection, txn: str, producer: tuple[int, int],
           partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    answer = connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [{
        "transactional_id": txn, "producer_id": producer[0], "producer_epoch": producer[1], "verify_only": True,
        "topics": [{"name": t, "partitions": p} for t, p in partitions.items()]}]}, 4)
    (result,) = answer.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code
            for t in result.topic_results for p in t.results_by_partition}


def end(connection: BlockingConnection, txn: str, producer: tuple[int, int], commit: bool, version: int = 3) -> int:
    return connection.request(ApiKey.END_TXN, {"transactional_id": txn, "producer_id": producer[0],
                                               "producer_epoch": producer[1], "committed": commit}, version).error_code


def describe(connection: BlockingConnection, txn: str) -> Any:
    return connection.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": (txn,)}, 0).transaction_states[0]


def committed_offsets(connection: BlockingConnection, group: str, require_stable: bool = False) -> dict[int, tuple[int, int]]:
    answer = connection.request(ApiKey.OFFSET_FETCH, {
        "group_id": group, "topics": [{"name": TOPIC, "partition_indexes": (0, 1)}],
        "require_stable": require_stable}, 7)
    return {p.partition_index: (p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions}


def new_transaction(broker1: BlockingConnection, **kwargs: Any) -> tuple[str, tuple[int, int]]:
    txn = f"txn-{uuid.uuid4().hex[:8]}"
    assert find(broker1, txn, 1).node_id == 1
    return txn, init_until_ready(broker1, txn, **kwargs)


def test_find_coordinator_for_a_transactional_id_names_the_broker_that_took_it(broker1: BlockingConnection,
                                                                              broker2: BlockingConnection) -> None:
    txn = f"txn-{uuid.uuid4().hex[:8]}"
    first = find(broker2, txn, 1)
    assert (first.error_code, first.node_id) == (NONE, 2)
    again = find(broker1, txn, 1)
    assert (again.error_code, again.node_id) == (NONE, 2)
    assert init(broker1, txn).error_code == NOT_COORDINATOR


def test_init_producer_id_bumps_the_epoch_and_fences_the_older_producer(broker1: BlockingConnection) -> None:
    txn, (producer_id, epoch) = new_transaction(broker1)
    assert init_until_ready(broker1, txn) == (producer_id, epoch + 1)
    stale = (producer_id, epoch)
    assert add_partitions(broker1, txn, stale, {TOPIC: [0]}) == {(TOPIC, 0): PRODUCER_FENCED}
    assert add_partitions(broker1, txn, stale, {TOPIC: [0]}, version=1) == {(TOPIC, 0): INVALID_PRODUCER_EPOCH}
    assert end(broker1, txn, stale, commit=True) == PRODUCER_FENCED
    assert end(broker1, txn, stale, commit=True, version=1) == INVALID_PRODUCER_EPOCH
    assert init(broker1, txn, producer=stale).error_code == PRODUCER_FENCED


def test_end_txn_without_add_partitions_is_an_invalid_transaction_state(broker1: BlockingConnection) -> None:
    txn, producer = new_transaction(broker1)
    assert end(broker1, txn, producer, commit=True) == INVALID_TXN_STATE
    assert end(broker1, txn, producer, commit=False) == INVALID_TXN_STATE
    assert describe(broker1, txn).transaction_state == "Empty"


def test_requests_for_an_unknown_producer_id_are_refused(broker1: BlockingConnection) -> None:
    txn, (producer_id, epoch) = new_transaction(broker1)
    wrong = (producer_id + 1000, epoch)
    assert add_partitions(broker1, txn, wrong, {TOPIC: [0]}) == {(TOPIC, 0): INVALID_PRODUCER_ID_MAPPING}
    assert end(broker1, txn, wrong, commit=False) == INVALID_PRODUCER_ID_MAPPING


def test_a_timeout_above_the_maximum_is_refused(broker1: BlockingConnection) -> None:
    txn = f"txn-{uuid.uuid4().hex[:8]}"
    find(broker1, txn, 1)
    assert init(broker1, txn, timeout_ms=60001).error_code == INVALID_TRANSACTION_TIMEOUT


def test_adding_an_unknown_partition_adds_nothing(broker1: BlockingConnection) -> None:
    txn, producer = new_transaction(broker1)
    assert add_partitions(broker1, txn, producer, {TOPIC: [0, 7]}) == {
        (TOPIC, 0): 55, (TOPIC, 7): UNKNOWN_TOPIC_OR_PARTITION}  # 55: OPERATION_NOT_ATTEMPTED
    assert describe(broker1, txn).transaction_state == "Empty"


def test_verify_only_accepts_exactly_the_partitions_the_transaction_added(broker1: BlockingConnection) -> None:
    txn, producer = new_transaction(broker1)
    assert verify(broker1, txn, producer, {TOPIC: [0]}) == {(TOPIC, 0): INVALID_TXN_STATE}
    assert add_partitions(broker1, txn, producer, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
    assert verify(broker1, txn, producer, {TOPIC: [0, 1]}) == {(TOPIC, 0): NONE, (TOPIC, 1): INVALID_TXN_STATE}
    assert verify(broker1, txn, (producer[0], producer[1] - 1 if producer[1] else 5), {TOPIC: [0]}) == {
        (TOPIC, 0): PRODUCER_FENCED}
    described = describe(broker1, txn)
    assert described.transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in described.topics] == [(TOPIC, [0])]


def _offsets_transaction(broker1: BlockingConnection, broker2: BlockingConnection, commit: bool,
                         end_it: bool = True, timeout_ms: int = 30000) -> tuple[str, str, tuple[int, int]]:
    txn, producer = new_transaction(broker1, timeout_ms=timeout_ms)
    group = f"group-{uuid.uuid4().hex[:8]}"
    assert find(broker2, group, 0).node_id == 2
    assert broker1.request(ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": txn, "producer_id": producer[0],
                                                       "producer_epoch": producer[1], "group_id": group},
                           3).error_code == NONE
    answer = broker2.request(ApiKey.TXN_OFFSET_COMMIT, {
        "transactional_id": txn, "group_id": group, "producer_id": producer[0], "producer_epoch": producer[1],
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1, "committed_metadata": ""},
            {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1, "committed_metadata": ""},
        ]}]}, 3)
    assert [p.error_code for t in answer.topics for p in t.partitions] == [NONE, NONE]
    assert committed_offsets(broker2, group) == {0: (-1, NONE), 1: (-1, NONE)}
    assert committed_offsets(broker2, group, require_stable=True) == {
        0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
    if end_it:
        assert end(broker1, txn, producer, commit=commit) == NONE
    return txn, group, producer


def test_offsets_committed_in_a_transaction_become_visible_when_it_commits(
        broker1: BlockingConnection, broker2: BlockingConnection) -> None:
    txn, group, producer = _offsets_transaction(broker1, broker2, commit=True)
    wait_until(lambda: describe(broker1, txn).transaction_state == "CompleteCommit", timeout_s=20,
               what="the commit to complete")
    assert committed_offsets(broker2, group, require_stable=True) == {0: (42, NONE), 1: (7, NONE)}
    assert end(broker1, txn, producer, commit=True) == NONE  # a retried commit is answered again
    assert end(broker1, txn, producer, commit=False) == INVALID_TXN_STATE


def test_offsets_of_an_aborted_transaction_are_dropped(broker1: BlockingConnection,
                                                       broker2: BlockingConnection) -> None:
    txn, group, _ = _offsets_transaction(broker1, broker2, commit=False)
    wait_until(lambda: describe(broker1, txn).transaction_state == "CompleteAbort", timeout_s=20,
               what="the abort to complete")
    assert committed_offsets(broker2, group, require_stable=True) == {0: (-1, NONE), 1: (-1, NONE)}


def test_a_transaction_left_open_past_its_timeout_is_aborted_and_its_producer_fenced(
        broker1: BlockingConnection, broker2: BlockingConnection) -> None:
    txn, group, producer = _offsets_transaction(broker1, broker2, commit=False, end_it=False, timeout_ms=1000)
    wait_until(lambda: describe(broker1, txn).transaction_state == "CompleteAbort", timeout_s=20,
               what="the coordinator to abort the abandoned transaction")
    described = describe(broker1, txn)
    assert (described.producer_id, described.producer_epoch) == (producer[0], producer[1] + 1)
    assert end(broker1, txn, producer, commit=True) == PRODUCER_FENCED
    assert committed_offsets(broker2, group, require_stable=True) == {0: (-1, NONE), 1: (-1, NONE)}


def test_a_new_producer_instance_aborts_the_open_transaction_of_the_old_one(
        broker1: BlockingConnection, broker2: BlockingConnection) -> None:
    txn, group, producer = _offsets_transaction(broker1, broker2, commit=False, end_it=False)
    assert init(broker1, txn).error_code == CONCURRENT_TRANSACTIONS
    assert init_until_ready(broker1, txn) == (producer[0], producer[1] + 2)
    assert describe(broker1, txn).transaction_state == "Empty"
    assert committed_offsets(broker2, group, require_stable=True) == {0: (-1, NONE), 1: (-1, NONE)}


def test_describe_and_list_transactions(broker1: BlockingConnection, broker2: BlockingConnection) -> None:
    txn, producer = new_transaction(broker1)
    assert add_partitions(broker1, txn, producer, {TOPIC: [1]}) == {(TOPIC, 1): NONE}
    described = describe(broker2, txn)  # any broker describes any transactional id
    assert (described.error_code, described.transaction_state, described.producer_id) == (NONE, "Ongoing", producer[0])
    assert described.transaction_timeout == ms(30000)
    listed = broker1.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": ("Ongoing", "Bogus"),
                                                        "producer_id_filters": (), "duration_filter": -1}, 1)
    assert listed.unknown_state_filters == ("Bogus",)
    assert (txn, producer[0], "Ongoing") in {(t.transactional_id, t.producer_id, t.transaction_state)
                                             for t in listed.transaction_states}
    assert describe(broker1, "never-seen").error_code == TRANSACTIONAL_ID_NOT_FOUND


def test_floe_transactions_cli_lists_and_describes(stack: LocalStack, broker1: BlockingConnection,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    txn, producer = new_transaction(broker1)
    assert add_partitions(broker1, txn, producer, {TOPIC: [0, 1]}) == {(TOPIC, 0): NONE, (TOPIC, 1): NONE}
    where = ["--bootstrap-servers", stack.bootstrap_servers]
    capsys.readouterr()
    assert main(["transactions", "describe", txn, *where, "--format", "json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described == {"transactional_id": txn, "coordinator": 1, "state": "Ongoing", "producer_id": producer[0],
                         "producer_epoch": producer[1], "timeout_ms": 30000, "start_time": described["start_time"],
                         "partitions": [f"{TOPIC}-0", f"{TOPIC}-1"]}
    assert described["start_time"] is not None
    assert main(["transactions", "list", *where, "--state", "Ongoing", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {"transactional_id": txn, "producer_id": producer[0], "state": "Ongoing", "coordinator": 1} in listed
    assert all(t["state"] == "Ongoing" for t in listed)
    assert main(["transactions", "describe", "no-such-id", *where]) == 1
    assert "cannot describe 'no-such-id'" in capsys.readouterr().err
