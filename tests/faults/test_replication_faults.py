"""Kafka's replication test at small scale: faults against the leader and the controller while an
idempotent acks=all producer writes, then no acknowledged record lost, duplicated or moved, and
every replica holding the same batches below the high watermark (tests.faults.harness)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.faults.harness import (
    SESSION_TIMEOUT_S,
    Role,
    bounce,
    fault_cluster,
    kill_both_followers,
    pause_leader,
    stop_then_restart,
)

CLEAN, HARD = signal.SIGTERM, signal.SIGKILL


@pytest.mark.parametrize(("role", "sig"), [
    pytest.param(Role.LEADER, CLEAN, id="leader-clean-shutdown", marks=pytest.mark.faults),
    pytest.param(Role.LEADER, HARD, id="leader-hard-kill"),
    pytest.param(Role.CONTROLLER, CLEAN, id="controller-clean-shutdown", marks=pytest.mark.faults),
    pytest.param(Role.CONTROLLER, HARD, id="controller-hard-kill", marks=pytest.mark.faults),
])
def test_stopping_a_broker_keeps_every_acknowledged_record_once_and_replicas_identical(
        tmp_path: Path, role: Role, sig: signal.Signals) -> None:
    with fault_cluster(tmp_path) as cluster:
        cluster.start_producing()
        stop_then_restart(cluster, role, sig)
        outcome = cluster.finish()
    outcome.assert_consistent()


@pytest.mark.faults
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("role", "sig"), [
    pytest.param(Role.LEADER, CLEAN, id="leader-clean-bounce"),
    pytest.param(Role.LEADER, HARD, id="leader-hard-bounce"),
    pytest.param(Role.CONTROLLER, CLEAN, id="controller-clean-bounce"),
    pytest.param(Role.CONTROLLER, HARD, id="controller-hard-bounce"),
])
def test_five_bounces_keep_every_acknowledged_record_once_and_replicas_identical(
        tmp_path: Path, role: Role, sig: signal.Signals) -> None:
    with fault_cluster(tmp_path) as cluster:
        cluster.start_producing()
        bounce(cluster, role, sig, times=5)
        outcome = cluster.finish()
    outcome.assert_consistent()


@pytest.mark.faults
def test_a_leader_paused_past_the_session_timeout_is_replaced_and_never_acknowledges_a_write(tmp_path: Path) -> None:
    with fault_cluster(tmp_path) as cluster:
        cluster.start_producing()
        probe = pause_leader(cluster)
        outcome = cluster.finish(extra_acked=probe.acknowledged)
    assert probe.paused_for_s > SESSION_TIMEOUT_S
    assert probe.new_leader != probe.paused_broker
    assert probe.probe_error != ErrorCode.none, (
        f"broker {probe.paused_broker}, paused while broker {probe.new_leader} took over, acknowledged an "
        f"acks=all write at offset {probe.probe_offset}")
    outcome.assert_consistent()


@pytest.mark.faults
def test_with_two_of_three_replicas_dead_acks_all_is_refused_and_the_high_watermark_stays(tmp_path: Path) -> None:
    with fault_cluster(tmp_path) as cluster:
        cluster.start_producing()
        probe = kill_both_followers(cluster)
        outcome = cluster.finish()
    errors = probe.errors
    assert errors and errors[-1] == ErrorCode.not_enough_replicas, f"produce answers: {[e.name for e in errors]}"
    first_refusal = errors.index(ErrorCode.not_enough_replicas)
    # Until the controller has fenced the dead followers they are still in the ISR: the write is
    # appended and waits for them in vain.
    assert set(errors[:first_refusal]) <= {ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append}, (
        f"produce answers: {[e.name for e in errors]}")
    assert set(errors[first_refusal:]) == {ErrorCode.not_enough_replicas}, f"produce answers: {[e.name for e in errors]}"
    # The HW never goes back, and never covers a record the dead followers did not have: no write
    # made after they died is committed.
    assert all(probe.high_watermark_before <= hw <= probe.replicated_end for hw in probe.high_watermarks), (
        f"high watermark moved from {probe.high_watermark_before} (followers' logs end at most at "
        f"{probe.replicated_end}): {[hw for _, hw in probe.attempts]}")
    outcome.assert_consistent()
