"""What moving replicated bytes over loopback TCP costs on this machine, by congestion control.

The local stack's brokers replicate over loopback: a follower sends a small Fetch request and the
leader answers with about a megabyte, most of it `sendfile` from the page cache. This measures
that traffic alone, without a broker: a child process (the follower) sends a 64-byte request and
reads a response of ``--response-kib`` into a reused buffer; the parent (the leader) answers each
request with `os.sendfile` from a file already in the page cache. Each side's CPU time per MiB is
taken from its own process, and the wall time per response is kept as well.

The same exchange runs under each congestion control named (per socket, `TCP_CONGESTION`, which
needs no privileges for those in `net.ipv4.tcp_allowed_congestion_control`), alternating, for
``--runs`` runs each; the peer is the first one named, by default the machine's default. On a
machine whose default is BBR and whose loopback has no `fq` qdisc, TCP paces BBR's sends in
software (hrtimers), which costs loopback traffic CPU that cubic (the kernel's usual default) does
not pay.

    .venv/bin/python bench/loopback_tcp.py [--congestion default,cubic] [--runs 7] [--responses 400]
        [--response-kib 1024]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import result_header, tcp_congestion_control, write_result  # noqa: E402

MIB = 1024 * 1024
REQUEST = b"f" * 64
SOURCE_MIB = 64


def receive_exactly(sock: socket.socket, view: memoryview) -> None:
    received = 0
    while received < len(view):
        n = sock.recv_into(view[received:])
        if n == 0:
            raise ConnectionError("the leader closed the connection")
        received += n


def follower(port: int, congestion: bytes, responses: int, response_bytes: int, report: int) -> None:
    """Child process: ask, read the answer, repeat; writes its CPU seconds to ``report``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    view = memoryview(bytearray(response_bytes))
    started = time.process_time()
    for _ in range(responses):
        sock.sendall(REQUEST)
        receive_exactly(sock, view)
    os.write(report, f"{time.process_time() - started}".encode())
    sock.close()


def exchange(source: Path, congestion: str, responses: int, response_bytes: int) -> dict[str, float]:
    """One run: CPU microseconds per MiB on each side and wall milliseconds per response."""
    name = congestion.encode()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(30)  # the follower connects at once unless it failed
    port = server.getsockname()[1]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        server.close()
        os.close(read_end)
        try:
            follower(port, name, responses, response_bytes, write_end)
        finally:
            os._exit(0)
    os.close(write_end)
    conn, _ = server.accept()
    conn.settimeout(30)
    server.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = memoryview(bytearray(len(REQUEST)))
    span = SOURCE_MIB * MIB - response_bytes
    with open(source, "rb") as file:
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        for number in range(responses):
            receive_exactly(conn, request)
            offset = (number * response_bytes) % span
            sent = 0
            while sent < response_bytes:
                sent += os.sendfile(conn.fileno(), file.fileno(), offset + sent, response_bytes - sent)
        leader_cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
    os.waitpid(pid, 0)
    follower_cpu = float(os.read(read_end, 64))
    os.close(read_end)
    conn.close()
    mib = responses * response_bytes / MIB
    return {"leader_cpu_us_per_mib": leader_cpu / mib * 1e6, "follower_cpu_us_per_mib": follower_cpu / mib * 1e6,
            "wall_ms_per_response": wall / responses * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--congestion", default="default,cubic",
                        help="congestion controls to compare, the first is the peer; 'default' is the machine's")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--responses", type=int, default=400, help="responses per run")
    parser.add_argument("--response-kib", type=int, default=1024)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "loopback_tcp.json")
    args = parser.parse_args()
    default = tcp_congestion_control()
    if default is None:
        parser.error("this machine does not say which TCP congestion control it uses")
    names = [default if name == "default" else name for name in args.congestion.split(",")]
    response_bytes = args.response_kib * 1024
    if response_bytes > SOURCE_MIB * MIB // 2:
        parser.error(f"--response-kib must be at most {SOURCE_MIB * 1024 // 2}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="floe-loopback-") as directory:
        source = Path(directory) / "segment"
        source.write_bytes(os.urandom(SOURCE_MIB * MIB))
        source.read_bytes()  # in the page cache, as a leader's recent segment is
        for number in range(args.runs):
            for name in names if number % 2 == 0 else names[::-1]:
                run = exchange(source, name, args.responses, response_bytes)
                runs[name].append(run)
                print(f"run {number + 1} {name}: leader {run['leader_cpu_us_per_mib']:.0f} us/MiB, follower "
                      f"{run['follower_cpu_us_per_mib']:.0f} us/MiB, {run['wall_ms_per_response']:.2f} ms per response",
                      flush=True)
    medians = {name: {key: round(statistics.median(run[key] for run in results), 1) for key in results[0]}
               for name, results in runs.items()}
    peer = names[0]
    both = {name: m["leader_cpu_us_per_mib"] + m["follower_cpu_us_per_mib"] for name, m in medians.items()}
    result = {
        **result_header("loopback_tcp"),
        "responses_per_run": args.responses,
        "response_bytes": response_bytes,
        "runs": {name: [{key: round(value, 1) for key, value in run.items()} for run in results]
                 for name, results in runs.items()},
        "medians": medians,
        "cpu_per_mib_both_sides_over_peer": {name: round(both[name] / both[peer], 3) for name in names},
    }
    for name in names:
        m = medians[name]
        print(f"{name}: leader {m['leader_cpu_us_per_mib']:.0f} + follower {m['follower_cpu_us_per_mib']:.0f} us/MiB "
              f"(median of {args.runs}), {m['wall_ms_per_response']:.2f} ms per response; "
              f"CPU over {peer}'s: {result['cpu_per_mib_both_sides_over_peer'][name]}")
    write_result(args.output, result)


if __name__ == "__main__":
    main()
