"""Transactions on a real `--security sasl_ssl` stack with an authorizer: the coordinator's markers and
the leaders' KIP-890 checks travel between brokers authenticated as their inter-broker principals, and
a client that authenticates as User:alice, even with ClusterAction and every right on the topic and
transactional id, cannot write (and so forge the end of) a transaction's markers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.cli import main
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.broker_core.security.test_trusted_replication import ALICE_PASSWORD, STANDARD, TIMEOUT_S, as_alice
from tests.support.stack import running_stack
from tests.support.transactions import committed_values
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: a secured stack of its own for one check (about 25 s); the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

TOPIC = "ledger"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"authorizer.class.name": STANDARD}
    with running_stack(tmp_path_factory.mktemp("trusted-txn-markers"), brokers=2, overrides=overrides,
                       security="sasl_ssl") as stack:
        admin = AdminClient(stack.client_config)
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(timeout=TIMEOUT_S)
        assert main(["users", "alter", "--stack", str(stack.directory), "--user", "alice",
                     "--add-config", f"SCRAM-SHA-512=[password={ALICE_PASSWORD}]"]) == 0
        for resource in (["--cluster"], ["--topic", "*"], ["--transactional-id", "*"]):
            assert main(["acls", "add", "--stack", str(stack.directory), "--allow-principal", "User:alice",
                         "--operation", "All", *resource]) == 0
        yield stack


def test_a_client_with_cluster_action_cannot_end_a_transaction_by_markers(stack: LocalStack) -> None:
    producer = Producer({**stack.client_config, "transactional.id": "ledger-tx", "transaction.timeout.ms": 60000})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"first", partition=0)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"second", partition=0)
    producer.flush(TIMEOUT_S)
    leader = MetadataStore(stack.aws).get_partition(TOPIC, 0).leader
    state = as_alice(stack, leader, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                     {"transactional_ids": ["ledger-tx"]}).transaction_states[0]
    assert state.transaction_state == "Ongoing"
    forged = as_alice(stack, leader, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": state.producer_id, "producer_epoch": state.producer_epoch, "transaction_result": False,
        "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]})
    assert [p.error_code for m in forged.markers for t in m.topics for p in t.partitions] == [
        ErrorCode.cluster_authorization_failed]
    # The forged abort wrote nothing: the producer's commit still lands, and both rounds read back.
    producer.commit_transaction(TIMEOUT_S)
    wait_until(lambda: committed_values(stack.client_config, TOPIC, TIMEOUT_S) == [b"first", b"second"], "both committed rounds read back",
               TIMEOUT_S)
