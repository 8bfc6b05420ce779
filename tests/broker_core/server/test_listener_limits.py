"""The listener's limits against a real broker, with raw sockets: bad size prefixes, many connections
declaring 100 MB requests and sending nothing more, a request larger than the memory pool, a
slowloris, idle connections, and the connection-count and creation-rate limits.

Each attack runs while a normal client (FloeClient) produces and reads back, and the broker's
resident memory is read from its process (psutil).
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from broker_core.client import FloeClient
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import encode_request
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord
from tests.support.sockets import closed_by_broker
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

MiB = 1024 * 1024
ATTACKERS = 100
BOGUS_SIZE = 100_000_000  # under socket.request.max.bytes (104857600): a legal size, never sent
RSS_GROWTH_LIMIT = 64 * MiB


def connect(stack, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((stack.host, stack.processes[1].port), timeout=10,
                                    source_address=(source, 0))
    return sock


def api_versions_round_trip(sock: socket.socket, correlation_id: int = 1) -> int:
    """Send ApiVersions v3 and read the answer; its correlation id."""
    body = build_entity(request_class(ApiKey.API_VERSIONS, 3),
                        {"client_software_name": "raw", "client_software_version": "1"})
    sock.settimeout(30)
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "raw", body))
    header = b""
    while len(header) < 8:
        chunk = sock.recv(8 - len(header))
        assert chunk, "the broker closed the connection"
        header += chunk
    size, answered = struct.unpack(">ii", header)
    left = size - 4
    while left:
        left -= len(sock.recv(min(left, 65536)))
    return answered


def produce_and_read_back(stack, topic: str, values: list[bytes], partitions: int = 1) -> list[bytes]:
    async def run() -> list[bytes]:
        async with FloeClient(stack.bootstrap_servers) as client:
            if topic not in await client.list_topics():
                await client.create_topic(topic, partitions=partitions)
            by_partition = {p: [SimpleRecord(value=v) for v in values[p::partitions]] for p in range(partitions)}
            results = await client.produce_many(topic, by_partition)
            read: list[bytes] = []
            for partition, result in sorted(results.items()):
                fetched = await client.fetch(topic, partition, result.base_offset, max_bytes=8 * MiB)
                read += [record.value for record in fetched.records][:len(by_partition[partition])]
            return read

    return asyncio.run(run())


def rss(stack) -> int:
    return psutil.Process(stack.processes[1].pid).memory_info().rss


def broker_log(stack) -> str:
    return Path(stack.processes[1].log_path).read_text(errors="replace")


@pytest.fixture(scope="module")
def default_stack(tmp_path_factory) -> Iterator:
    with running_stack(tmp_path_factory.mktemp("listener-defaults")) as stack:
        yield stack


@pytest.mark.parametrize("size", [104_857_601, 2**31 - 1, -1, -(2**31)])
def test_a_size_prefix_above_the_limit_or_negative_closes_the_connection_and_is_logged_with_the_peer(
        default_stack, size: int) -> None:
    sock = connect(default_stack)
    peer_port = sock.getsockname()[1]
    sock.sendall(struct.pack(">i", size))
    assert closed_by_broker(sock, 30)
    sock.close()
    wait_until(lambda: f"frame size {size} outside" in broker_log(default_stack), "the refusal is logged", 10)
    lines = [line for line in broker_log(default_stack).splitlines() if f"frame size {size} outside" in line]
    assert len(lines) == 1 and str(peer_port) in lines[0]


def test_connections_declaring_100_mb_and_sending_nothing_more_leave_memory_bounded_and_clients_working(
        default_stack) -> None:
    assert produce_and_read_back(default_stack, "before-attack", [b"warm-up"]) == [b"warm-up"]
    before = rss(default_stack)
    attackers = [connect(default_stack) for _ in range(ATTACKERS)]
    try:
        for sock in attackers:
            sock.sendall(struct.pack(">i", BOGUS_SIZE))
        values = [f"during-attack-{i}".encode() * 50 for i in range(200)]
        assert produce_and_read_back(default_stack, "during-attack", values) == values
        time.sleep(1)
        growth = rss(default_stack) - before
        assert growth < RSS_GROWTH_LIMIT, f"broker RSS grew by {growth / MiB:.1f} MiB"
        # A declared size within the limit is a request in progress: the broker waits for the rest.
        assert not any(closed_by_broker(sock, 0.01) for sock in attackers[:5])
    finally:
        for sock in attackers:
            sock.close()
    fresh = connect(default_stack)
    assert api_versions_round_trip(fresh, 7) == 7
    fresh.close()


@pytest.fixture(scope="module")
def limited_stack(tmp_path_factory) -> Iterator:
    overrides = {
        "max.connections.per.ip": "6",
        "max.connections.per.ip.overrides": "127.0.0.2:2",
        "connections.max.idle.ms": "3000",
        "queued.max.request.bytes": str(1 * MiB),
        "max.connection.creation.rate": "20",
    }
    with running_stack(tmp_path_factory.mktemp("listener-limits"), overrides=overrides) as stack:
        yield stack


def test_a_request_larger_than_the_whole_memory_pool_is_appended(limited_stack) -> None:
    values = [bytes([i]) * 900_000 for i in range(3)]  # one request of about 2.7 MB, the pool is 1 MiB
    assert produce_and_read_back(limited_stack, "larger-than-the-pool", values, partitions=3) == values


def test_connections_beyond_the_per_ip_limit_are_closed_at_once_and_logged_once_per_interval(limited_stack) -> None:
    time.sleep(1.5)  # let the creation rate's bucket refill after the fixtures' clients
    accepted = [connect(limited_stack) for _ in range(6)]
    refusals = 0

    def answered_on_a_new_connection() -> bool:
        nonlocal refusals
        sock = connect(limited_stack)
        if closed_by_broker(sock, 0.5):
            refusals += 1
            sock.close()
            return False
        accepted.append(sock)
        return api_versions_round_trip(sock, 9) == 9

    try:
        for i, sock in enumerate(accepted):
            assert api_versions_round_trip(sock, i) == i
        refused = [connect(limited_stack) for _ in range(3)]
        assert all(closed_by_broker(sock, 10) for sock in refused)
        refusals += len(refused)
        accepted.pop(0).close()
        wait_until(answered_on_a_new_connection, "a slot freed by a closed connection is taken", 10)
    finally:
        for sock in accepted:
            sock.close()

    def summarised() -> list[int]:
        lines = [line for line in broker_log(limited_stack).splitlines() if "connections from 127.0.0.1 " in line]
        assert all("max.connections.per.ip (6) reached" in line for line in lines)
        return [int(re.search(r"refused (\d+) connections", line).group(1)) for line in lines]

    wait_until(lambda: sum(summarised()) == refusals, "every refusal is summarised", 25)
    assert len(summarised()) < refusals  # one line per interval, not one per refused connection


def test_an_address_with_an_override_gets_its_own_limit(limited_stack) -> None:
    time.sleep(1.5)
    accepted = [connect(limited_stack, "127.0.0.2") for _ in range(2)]
    try:
        assert [api_versions_round_trip(sock, i) for i, sock in enumerate(accepted)] == [0, 1]
        third = connect(limited_stack, "127.0.0.2")
        assert closed_by_broker(third, 10)
        other = connect(limited_stack, "127.0.0.3")  # the default limit still applies to everyone else
        assert api_versions_round_trip(other, 5) == 5
        other.close()
    finally:
        for sock in accepted:
            sock.close()


def test_connections_beyond_the_creation_rate_are_closed_at_once(limited_stack) -> None:
    time.sleep(1.5)
    burst = [connect(limited_stack, f"127.0.1.{i}") for i in range(1, 61)]  # one per address: no per-IP limit
    try:
        time.sleep(1)  # the refused are closed by now; the accepted are not idle yet (3 s)
        closed = [closed_by_broker(sock, 0.01) for sock in burst]
        # The bucket holds one second's worth (20) and refills at 20/s while the burst is accepted.
        assert 20 <= closed.count(False) <= 45 and closed.count(True) >= 15
    finally:
        for sock in burst:
            sock.close()


def test_an_idle_connection_is_closed_and_one_sending_requests_is_not(limited_stack) -> None:
    time.sleep(1.5)
    idle, busy = connect(limited_stack, "127.0.0.4"), connect(limited_stack, "127.0.0.5")
    try:
        for round_trip in range(8):  # 8 s: well past connections.max.idle.ms (3 s)
            assert api_versions_round_trip(busy, round_trip) == round_trip
            time.sleep(1)
        assert closed_by_broker(idle, 0.1)
    finally:
        idle.close()
        busy.close()


def test_a_slowloris_trickling_one_byte_a_second_is_closed_by_the_idle_timeout(limited_stack) -> None:
    time.sleep(1.5)
    sock = connect(limited_stack, "127.0.0.6")
    sock.sendall(struct.pack(">i", 1000))  # a request of 1000 bytes that never completes
    started = time.monotonic()
    closed = False
    try:
        while not closed and time.monotonic() - started < 30:
            sock.sendall(b"x")
            closed = closed_by_broker(sock, 1.0)
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        sock.close()
    assert closed
    assert produce_and_read_back(limited_stack, "after-slowloris", [b"fine"]) == [b"fine"]


def test_connections_beyond_max_connections_are_closed_at_once(tmp_path) -> None:
    with running_stack(tmp_path, overrides={"max.connections": "3"}) as stack:
        accepted = [connect(stack, f"127.0.2.{i}") for i in range(1, 4)]
        try:
            assert [api_versions_round_trip(sock, i) for i, sock in enumerate(accepted)] == [0, 1, 2]
            assert closed_by_broker(connect(stack, "127.0.2.9"), 10)
        finally:
            for sock in accepted:
                sock.close()
