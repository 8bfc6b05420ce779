"""Raw-socket checks for tests that play a misbehaving client."""

from __future__ import annotations

import socket
import time


def closed_by_broker(sock: socket.socket, within_s: float) -> bool:
    """Whether the broker closes ``sock`` within ``within_s`` (reading whatever it sends first)."""
    deadline = time.monotonic() + within_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True
    return False
