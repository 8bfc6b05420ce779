"""Shared by the fuzz targets: a way to run `decode_request` on one frame in a forked child.

kio 0.6.5's native reader reserves room for an array's declared element count before reading
the elements; when the count is so large that the reservation cannot be satisfied, the Rust
allocator aborts the whole process ("memory allocation of N bytes failed"). Decoding fuzzed
frames in-process could therefore kill the test run, and sending such a frame to a broker kills
the broker. Each frame is decoded in a forked child instead, which reports what happened; the
targets treat that one known abort as its own finding (tests/fuzz/test_request_decode_fuzz.py
holds the strict-xfail regression tests for it) and check everything else.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_core.protocol.framing import InvalidRequestError, decode_request

KIO_ALLOCATION_ABORT = re.compile(rb"memory allocation of (\d+) bytes failed")


@dataclass(frozen=True, slots=True)
class DecodeOutcome:
    """What decode_request did with a frame: ``kind`` is "request", "invalid" (InvalidRequestError or
    a subclass, named in ``detail``), "escaped" (any other exception, named in ``detail``) or
    "aborted" (the process died; ``detail`` is its stderr)."""

    kind: str
    detail: str = ""

    @property
    def is_known_kio_abort(self) -> bool:
        return self.kind == "aborted" and KIO_ALLOCATION_ABORT.search(self.detail.encode()) is not None


def decode_in_child(frame: bytes) -> DecodeOutcome:
    result_read, result_write = os.pipe()
    error_read, error_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: decode, report, and leave without running any of the parent's cleanup
        faulthandler.disable()  # an abort's message then reaches the pipe, not the test run's stderr
        os.dup2(error_write, 2)
        try:
            decode_request(frame)
            message = "request:"
        except InvalidRequestError as exc:
            message = f"invalid:{type(exc).__name__}"
        except BaseException as exc:
            message = f"escaped:{type(exc).__name__}: {exc}"
        os.write(result_write, message.encode()[:4096])
        os._exit(0)
    os.close(result_write)
    os.close(error_write)
    with os.fdopen(result_read, "rb") as results, os.fdopen(error_read, "rb") as errors:
        message = results.read().decode()
        stderr = errors.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return DecodeOutcome("aborted", f"signal {signal.Signals(os.WTERMSIG(status)).name}: "
                                        f"{stderr[:500].decode(errors='replace')}")
    kind, _, detail = message.partition(":")
    return DecodeOutcome(kind, detail)


@pytest.fixture(scope="session")
def decode_outcome() -> Callable[[bytes], DecodeOutcome]:
    """decode_request run on a frame (without its size prefix) in a forked child."""
    return decode_in_child


def _memory_and_swap_bytes() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(fields["MemTotal"].split()[0]) + int(fields["SwapTotal"].split()[0])) * 1024


@pytest.fixture(scope="session")
def huge_array_reservation_fails() -> bool:
    """Whether kio's reservation for a compact array of 2**32 - 2 entries (8 bytes each: 32 GiB) fails
    here, aborting the process: yes unless the kernel always overcommits or memory and swap exceed it."""
    if not Path("/proc/meminfo").exists():
        return False
    always_overcommits = Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1"
    return not always_overcommits and _memory_and_swap_bytes() < 8 * (2**32 - 2)
