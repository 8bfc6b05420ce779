"""KIP-890 part 1 on the partition leader: ask the transaction coordinator before a transaction starts here.

Before the leader appends a transactional batch for a producer that has no open transaction on the
partition, it asks the producer's transaction coordinator whether the partition was added to the
transaction: where the coordinator is comes from this broker's own transaction coordinator
(``coordinator_of``: the answer FindCoordinator key type 1 gives, without a request that an authorizer
would check against the broker's principal), then AddPartitionsToTxn v4 with verify_only goes to the coordinator, as
Kafka's AddPartitionsToTxnManager does.
The coordinator answers per partition (NONE when added; INVALID_TXN_STATE, PRODUCER_FENCED,
INVALID_PRODUCER_ID_MAPPING otherwise), and that code is the produce's. When the coordinator cannot be
found or reached the answer is NOT_ENOUGH_REPLICAS, Kafka's retriable stand-in for an unavailable,
loading or moved coordinator, so the producer retries. A late or hanging write thus cannot open a
transaction that its coordinator has already ended, or never began.

Between the answer and the append a marker may end the transaction; the partition's
`VerificationGuard` catches that:
the partition hands one out when verification starts, a marker for the producer revokes it, and the
append goes ahead only with the guard still valid (else INVALID_TXN_STATE), as Kafka's
VerificationGuard does. Runs on the broker's event loop; connections are opened on first use and
reopened after a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker_core.client import ClientError
from broker_core.client.peers import PeerConnections
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class

if TYPE_CHECKING:
    from .context import BrokerContext

log = logging.getLogger(__name__)

_ADD_PARTITIONS_VERIFY_VERSION = 4
# Coordinator errors that mean "ask again later", answered to the producer as NOT_ENOUGH_REPLICAS.
_RETRIABLE = frozenset({ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                        ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions})


class TransactionVerifier:
    """Asks transaction coordinators, over Kafka's wire protocol, whether partitions are in a transaction."""

    def __init__(self, context: BrokerContext, coordinator_of: Callable[[str], Awaitable[int | None]]) -> None:
        self.context = context
        self.coordinator_of = coordinator_of
        self._peers = PeerConnections.of_broker(context, "txn-verifier")

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """The coordinator's answer for each (topic, partition): NONE when it is in the transaction."""
        partitions = list(partitions)
        try:
            coordinator = await self.coordinator_of(transactional_id)
            if coordinator is None:
                return dict.fromkeys(partitions, ErrorCode.not_enough_replicas)
            answers = await self._ask(coordinator, transactional_id, producer_id, producer_epoch, partitions)
        except (ClientError, OSError) as exc:
            log.info("transaction verification for %r failed: %s", transactional_id, exc)
            return dict.fromkeys(partitions, ErrorCode.not_enough_replicas)
        return {key: ErrorCode.not_enough_replicas if code in _RETRIABLE else code for key, code in answers.items()}

    async def _ask(self, node_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        connection = await self._peers.get(node_id)
        if connection is None:
            return dict.fromkeys(partitions, ErrorCode.not_enough_replicas)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = build_entity(request_class(ApiKey.ADD_PARTITIONS_TO_TXN, _ADD_PARTITIONS_VERIFY_VERSION), {
            "transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                              "producer_epoch": producer_epoch, "verify_only": True,
                              "topics": [{"name": name, "partitions": indexes} for name, indexes in topics.items()]}]})
        response = await connection.send(ApiKey.ADD_PARTITIONS_TO_TXN, request)
        answers = dict.fromkeys(partitions, ErrorCode(response.error_code) if response.error_code else
                                ErrorCode.invalid_txn_state)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    key = (topic.name, partition.partition_index)
                    if key in answers:
                        answers[key] = ErrorCode(partition.partition_error_code)
        return answers

    async def start(self) -> None:
        """Nothing to start: connections to coordinators are opened on first use."""

    async def stop(self) -> None:
        await self._peers.close()
