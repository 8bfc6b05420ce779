"""Shared by the fuzz targets: a way to run `decode_request` on one frame in a forked child.

kio 0.6.5's native reader reserves room for an array's declared element count before reading
the elements; when the count is so large that the reservation cannot be satisfied, the Rust
allocator aborts the whole process ("memory allocation of N bytes failed"). Decoding fuzzed
frames in-process could therefore kill the test run, and sending such a frame to a broker kills
the broker. decode_request therefore walks a frame's declared lengths before kio reads it
(broker_core/protocol/bounds.py). Each fuzzed frame is still decoded in a forked child, so that
any abort shows up as the outcome "aborted", a failure, instead of killing the test run.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from broker_core.protocol.framing import InvalidRequestError, decode_request


@dataclass(frozen=True, slots=True)
class DecodeOutcome:
    """What decode_request did with a frame: ``kind`` is "request", "invalid" (InvalidRequestError or
    a subclass, named in ``detail``), "escaped" (any other exception, named in ``detail``) or
    "aborted" (the process died; ``detail`` is its stderr)."""

    kind: str
    detail: str = ""


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
