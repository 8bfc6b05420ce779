"""Launch moto in server mode as a separate process, so S3 and DynamoDB are reached over real HTTP.

The local stack (``floe local up``) and the integration tests both use this launcher: it runs
moto's server (``moto.server``, with `_ONE_BACKUP_PER_TABLE`) on ``-H <host> -p <port>`` in its own process group, waits until the server
answers HTTP, and hands back a ``MotoServer`` with the endpoint URL and process id. Asking for port
0 picks a free port; because another process can grab that port between the probe and moto's bind,
the launcher retries a few times with a fresh port if moto exits during start-up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

_START_ATTEMPTS = 3
_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


class MotoServerStartError(RuntimeError):
    """moto did not answer HTTP on its port before the start-up deadline, or exited early."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"moto server on {host}:{port} did not start: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


@dataclass
class MotoServer:
    """A running moto server process; ``stop()`` ends it (idempotent)."""

    host: str
    port: int
    process: subprocess.Popen = field(repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        # moto runs in its own process group (start_new_session), so the group holds moto alone.
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _answers_http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is up
    except OSError:
        return False


# moto 5's server dispatches a request without an Authorization header (a presigned URL) by guesswork
# and hands a presigned sts:GetCallerIdentity to S3; moto's own single-service app serves it right.
_SINGLE_SERVICE = ("import sys; from moto.moto_server.werkzeug_app import create_backend_app; "
                   "from werkzeug.serving import run_simple; "
                   "run_simple(sys.argv[1], int(sys.argv[2]), create_backend_app(sys.argv[3]), threaded=True)")


# moto 5's TransactWriteItems backs up (deep-copies) an item's whole table once per ITEM, before it
# writes, so a transaction of n items over a table of m items costs n x m item copies: a 98-partition
# leader election over 1,000 partitions copies 98,000 items and outlasts a client's read timeout.
# DynamoDB has no such cost. The launcher makes moto copy each table once per transaction (the same
# backup: every copy is taken before the first write), so the local stack's metadata writes cost what
# their request count says, which is what the scale benchmark measures.
_ONE_BACKUP_PER_TABLE = (
    "import copy, functools, threading, sys\n"
    "import moto.dynamodb.models as models\n"
    "local = threading.local()\n"
    "class OncePerTransaction:\n"
    "    def __getattr__(self, name): return getattr(copy, name)\n"
    "    def deepcopy(self, obj, memo=None):\n"
    "        done = getattr(local, 'done', None)\n"
    "        if done is None: return copy.deepcopy(obj, memo)\n"
    "        if id(obj) not in done: done[id(obj)] = copy.deepcopy(obj, memo)\n"
    "        return done[id(obj)]\n"
    "models.copy = OncePerTransaction()\n"
    "original = models.DynamoDBBackend.transact_write_items\n"
    "@functools.wraps(original)\n"
    "def transact_write_items(self, transact_items):\n"
    "    local.done = {}\n"
    "    try: return original(self, transact_items)\n"
    "    finally: local.done = None\n"
    "models.DynamoDBBackend.transact_write_items = transact_write_items\n"
    "from moto.server import main\n"
    "main(sys.argv[1:])\n"
)


def _command(host: str, port: int, service: str | None) -> list[str]:
    if service is None:
        return [sys.executable, "-c", _ONE_BACKUP_PER_TABLE, "-H", host, "-p", str(port)]
    return [sys.executable, "-c", _SINGLE_SERVICE, host, str(port), service]


def _launch(host: str, port: int, log_path: Path | None, service: str | None = None) -> MotoServer | None:
    """Start moto on one port; None if it exited during start-up (port taken)."""
    log_file = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL
    try:
        process = subprocess.Popen(
            _command(host, port, service),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if log_path is not None:
            log_file.close()
    server = MotoServer(host=host, port=port, process=process)
    deadline = time.monotonic() + _READY_TIMEOUT_S
    probe_url = f"{server.endpoint_url}/moto-api/"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        if _answers_http(probe_url):
            return server
        time.sleep(0.05)
    server.stop()
    raise MotoServerStartError(host, port, f"no HTTP answer within {_READY_TIMEOUT_S:.0f} s")


def start_moto_server(
    host: str = "127.0.0.1", port: int = 0, log_path: str | Path | None = None, *, service: str | None = None
) -> MotoServer:
    """Start moto in server mode on host:port (0 = a free port) and wait until it answers HTTP.

    Output of the moto process goes to ``log_path`` (appended) or is discarded. With ``service``
    (``"sts"``) the process serves that one moto service at every path (see ``_SINGLE_SERVICE``).
    """
    log = Path(log_path) if log_path is not None else None
    attempts = _START_ATTEMPTS if port == 0 else 1
    for _ in range(attempts):
        chosen = port if port != 0 else _free_port(host)
        server = _launch(host, chosen, log, service)
        if server is not None:
            return server
    raise MotoServerStartError(host, port, "the moto process exited during start-up (is the port in use?)")
