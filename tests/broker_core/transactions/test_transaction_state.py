"""The coordinator's transaction state machine, without I/O: Kafka's transitions and error codes."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from broker_core.transactions.state import (
    MAX_PRODUCER_EPOCH,
    TopicPartition,
    TransactionStateError,
    TxnState,
    new_transaction,
)

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def ongoing():
    return new_transaction("tx", 7, 60000, now_ms=1000).add(frozenset({P0}), frozenset(), now_ms=2000)


def test_adding_partitions_starts_the_transaction_and_keeps_its_start_time() -> None:
    state = ongoing()
    assert (state.state, state.partitions, state.start_ms) == (TxnState.ONGOING, frozenset({P0}), 2000)
    more = state.add(frozenset({P1}), frozenset({"group"}), now_ms=3000)
    assert (more.partitions, more.groups, more.start_ms) == (frozenset({P0, P1}), frozenset({"group"}), 2000)
    assert more.covers(frozenset({P1}), frozenset({"group"}))
    assert not state.covers(frozenset({P1}), frozenset())


def test_commit_prepares_then_completes_and_clears_the_partitions() -> None:
    prepared = ongoing().end(commit=True, now_ms=3000)
    assert prepared is not None and prepared.state is TxnState.PREPARE_COMMIT
    done = prepared.complete(now_ms=4000)
    assert (done.state, done.partitions, done.groups) == (TxnState.COMPLETE_COMMIT, frozenset(), frozenset())
    assert done.end(commit=True, now_ms=5000) is None  # a retried EndTxn
    with pytest.raises(TransactionStateError) as refused:
        done.end(commit=False, now_ms=5000)
    assert refused.value.code == ErrorCode.invalid_txn_state


@pytest.mark.parametrize(("commit", "code"), [(True, ErrorCode.concurrent_transactions),
                                              (False, ErrorCode.invalid_txn_state)])
def test_end_while_preparing_a_commit(commit: bool, code: ErrorCode) -> None:
    prepared = ongoing().end(commit=True, now_ms=3000)
    with pytest.raises(TransactionStateError) as refused:
        prepared.end(commit=commit, now_ms=3500)
    assert refused.value.code == code


def test_end_without_a_transaction_is_an_invalid_state() -> None:
    with pytest.raises(TransactionStateError) as refused:
        new_transaction("tx", 7, 60000, now_ms=0).end(commit=True, now_ms=1)
    assert refused.value.code == ErrorCode.invalid_txn_state


def test_adding_while_markers_are_written_is_a_concurrent_transaction() -> None:
    prepared = ongoing().end(commit=False, now_ms=3000)
    with pytest.raises(TransactionStateError) as refused:
        prepared.add(frozenset({P1}), frozenset(), now_ms=3500)
    assert refused.value.code == ErrorCode.concurrent_transactions


def test_the_producer_must_be_the_current_one() -> None:
    state = ongoing()
    with pytest.raises(TransactionStateError) as fenced:
        state.check_producer(7, -1 + state.producer_epoch)
    assert fenced.value.code == ErrorCode.producer_fenced
    with pytest.raises(TransactionStateError) as unknown:
        state.check_producer(8, state.producer_epoch)
    assert unknown.value.code == ErrorCode.invalid_producer_id_mapping


def test_a_timeout_abort_bumps_the_epoch() -> None:
    state = ongoing()
    assert not state.timed_out(now_ms=2000 + 60000)
    assert state.timed_out(now_ms=2000 + 60001)
    aborting = state.abort_fencing(now_ms=70000)
    assert (aborting.state, aborting.producer_epoch) == (TxnState.PREPARE_ABORT, state.producer_epoch + 1)


def test_init_bumps_the_epoch_until_it_is_exhausted_then_takes_a_new_producer_id() -> None:
    state = new_transaction("tx", 7, 60000, now_ms=0)
    bumped = state.fence_epoch(None, 30000, now_ms=1)
    assert (bumped.producer_id, bumped.producer_epoch, bumped.timeout_ms) == (7, 1, 30000)
    exhausted = dataclasses.replace(bumped, producer_epoch=MAX_PRODUCER_EPOCH)
    assert exhausted.needs_new_producer_id()
    renewed = exhausted.fence_epoch(99, 30000, now_ms=2)
    assert (renewed.producer_id, renewed.producer_epoch, renewed.state) == (99, 0, TxnState.EMPTY)
    with pytest.raises(TransactionStateError) as refused:
        ongoing().fence_epoch(None, 30000, now_ms=3)
    assert refused.value.code == ErrorCode.concurrent_transactions


def test_partition_keys_round_trip() -> None:
    assert TopicPartition.parse(TopicPartition("a.b-c_d", 12).key()) == TopicPartition("a.b-c_d", 12)
