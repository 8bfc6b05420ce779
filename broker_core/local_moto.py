"""Launch moto in server mode as a separate process, so S3 and DynamoDB are reached over real HTTP.

The local stack (``floe local up``) and the integration tests both use this launcher: it runs
moto's server (``moto.server``, with `_MOTO_PATCHES`) on ``-H <host> -p <port>`` in its own process group, waits until the server
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


# Two costs of moto 5 that DynamoDB does not have, and that would otherwise decide what the local
# stack measures at thousands of partitions (bench/scale_bench.py):
# - TransactWriteItems backs up (deep-copies) an item's whole table once per ITEM before it writes, so
#   a transaction of n items over a table of m items copies n x m items (98 partition updates over
#   1,000 partitions: 13.8 s). Here the transaction backs up only the items it names (deep copies
#   taken before the first write) and puts them back if it fails, under one lock, so transactions
#   stay all-or-nothing with respect to each other.
# - Read results go through moto's botocore-model-driven serializer, about 18 ms per item (a Scan of
#   1,000 partition items took 18 s). Here GetItem, BatchGetItem, Query and Scan results, which moto
#   already holds in DynamoDB's JSON shape, are written with json.dumps (binary values base64, as the
#   serializer writes them); the answers are identical, as a comparison of both paths showed.
# And one guarantee DynamoDB has that moto's threaded server does not: a conditional write is atomic.
# moto checks an item's condition and then writes it, and two requests served by two threads can both
# pass the check (two producer-id allocations conditional on the same version both succeeded under
# load). Here every single-item write and every read holds the transactions' lock, so a condition is
# checked and applied as one step and a read never sees half of an update.
# - Every request picks its service's app under one lock, by looking at its headers and listing moto's
#   modules on disk (a third of moto's busy samples while a topic of 1,000 partitions was created,
#   requests queuing on that lock). Here a SigV4-signed request for DynamoDB's 2012-08-10 API (a
#   credential scope naming dynamodb, an X-Amz-Target of DynamoDB_20120810) gets the DynamoDB app
#   moto chose for the first such request, as moto's own dispatch would choose it again (its rule:
#   the signing service names the backend, and that API version is "dynamodb"); any other request
#   goes through moto's dispatch.
# And one transport difference: werkzeug's development server answers every request with "Connection:
# close" (its request handler cannot tell where an unread request body ends, so it drains the socket
# after each answer), which made every DynamoDB call of a broker open a new TCP connection to moto,
# where DynamoDB's endpoint and botocore's connection pool keep connections open. Here the handler
# reads each request's body before moto sees it, so nothing is left to drain, and keeps the connection
# open unless the client asked to close it or moto's app raised (its answer may then be cut short).
# It sends without Nagle's delay (TCP_NODELAY, as urllib3 does on its side): an answer goes out as two
# writes, headers then body, and on a kept connection the body would otherwise wait for the client's
# delayed ACK of the headers, about 40 ms per call (a GetItem went from 11 ms to 60 ms without it).
_MOTO_PATCHES = (
    "import base64, copy, functools, json, threading, sys\n"
    "import moto.dynamodb.models as models\n"
    "import moto.dynamodb.responses as responses\n"
    "from moto.core.responses import ActionResult\n"
    "from moto.dynamodb.models.dynamo_type import DynamoType\n"
    "local = threading.local()\n"
    "lock = threading.RLock()\n"
    "class LiveTables:\n"
    "    def __getattr__(self, name): return getattr(copy, name)\n"
    "    def deepcopy(self, obj, memo=None):\n"
    "        return obj if getattr(local, 'items_backed_up', False) else copy.deepcopy(obj, memo)\n"
    "models.copy = LiveTables()\n"
    "original = models.DynamoDBBackend.transact_write_items\n"
    "def item_key(table, op):\n"
    "    key = op['Item'] if 'Item' in op else op['Key']\n"
    "    hash_value = DynamoType(key[table.hash_key_attr])\n"
    "    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None\n"
    "    return hash_value, range_value\n"
    "@functools.wraps(original)\n"
    "def transact_write_items(self, transact_items):\n"
    "    with lock:\n"
    "        backups = []\n"
    "        for entry in transact_items:\n"
    "            op = next(iter(entry.values()))\n"
    "            table = self.tables.get(op.get('TableName'))\n"
    "            if table is None: continue\n"
    "            try: hash_value, range_value = item_key(table, op)\n"
    "            except KeyError: continue\n"
    "            backups.append((table, hash_value, range_value, copy.deepcopy(table.get_item(hash_value, range_value))))\n"
    "        local.items_backed_up = True\n"
    "        try: return original(self, transact_items)\n"
    "        except BaseException:\n"
    "            for table, hash_value, range_value, item in reversed(backups):\n"
    "                if item is None: table.delete_item(hash_value, range_value)\n"
    "                elif range_value is None: table.items[hash_value] = item\n"
    "                else: table.items[hash_value][range_value] = item\n"
    "            raise\n"
    "        finally: local.items_backed_up = False\n"
    "models.DynamoDBBackend.transact_write_items = transact_write_items\n"
    "def atomic(name):\n"
    "    operation = getattr(models.DynamoDBBackend, name)\n"
    "    @functools.wraps(operation)\n"
    "    def locked(self, *args, **kwargs):\n"
    "        with lock: return operation(self, *args, **kwargs)\n"
    "    return locked\n"
    "for name in ('put_item', 'update_item', 'delete_item', 'get_item', 'query', 'scan'):\n"
    "    setattr(models.DynamoDBBackend, name, atomic(name))\n"
    "def plain(value):\n"
    "    if isinstance(value, bytes): return base64.b64encode(value).decode()\n"
    "    if isinstance(value, (set, frozenset, tuple)): return list(value)\n"
    "    if hasattr(value, 'to_json'): return value.to_json()\n"
    "    raise TypeError(type(value).__name__)\n"
    "def as_json(name):\n"
    "    read = getattr(responses.DynamoHandler, name)\n"
    "    @functools.wraps(read)\n"
    "    def handler(self):\n"
    "        result = read(self)\n"
    "        if isinstance(result, ActionResult) and isinstance(result.result, dict):\n"
    "            return json.dumps(result.result, default=plain)\n"
    "        return result\n"
    "    return handler\n"
    "for name in ('get_item', 'batch_get_item', 'query', 'scan'):\n"
    "    setattr(responses.DynamoHandler, name, as_json(name))\n"
    "from moto.moto_server.werkzeug_app import DomainDispatcherApplication\n"
    "dispatch = DomainDispatcherApplication.get_application\n"
    "def signed_for_dynamodb(environ):\n"
    "    if not environ.get('HTTP_X_AMZ_TARGET', '').startswith('DynamoDB_20120810.'): return False\n"
    "    path = environ.get('PATH_INFO', '')\n"
    "    if path.startswith(('/moto-api', '/latest/meta-data/', '/latest/api/')) or path == '/favicon.ico': return False\n"
    "    try: scope = environ.get('HTTP_AUTHORIZATION', '').split(',')[0].split()[1].split('/')\n"
    "    except IndexError: return False\n"
    "    return len(scope) == 5 and scope[3].lower() == 'dynamodb'\n"
    "def get_application(self, environ):\n"
    "    if signed_for_dynamodb(environ):\n"
    "        app = self.app_instances.get('dynamodb')\n"
    "        if app is not None: return app\n"
    "    return dispatch(self, environ)\n"
    "DomainDispatcherApplication.get_application = get_application\n"
    "import io, socket\n"
    "import moto.server\n"
    "from werkzeug.serving import DechunkedInput\n"
    "class Drained:\n"
    "    def read(self, *args): return b''\n"
    "    def readline(self, *args): return b''\n"
    "class KeepAlive(moto.server.MotoRequestHandler):\n"
    "    def setup(self):\n"
    "        super().setup()\n"
    "        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "    def make_environ(self):\n"
    "        environ = super().make_environ()\n"
    "        stream = environ['wsgi.input']\n"
    "        if isinstance(stream, DechunkedInput):\n"
    "            body = stream.read()\n"
    "        else:\n"
    "            body = stream.read(int(environ.get('CONTENT_LENGTH') or 0))\n"
    "        environ['wsgi.input'] = io.BytesIO(body)\n"
    "        self.rfile = Drained()\n"
    "        return environ\n"
    "    def run_wsgi(self):\n"
    "        socket_file = self.rfile\n"
    "        try:\n"
    "            super().run_wsgi()\n"
    "        finally:\n"
    "            self.rfile = socket_file\n"
    "            if getattr(self, 'environ', {}).get('floe.app_failed'):\n"
    "                self.close_connection = True\n"
    "    def send_header(self, keyword, value):\n"
    "        if keyword.lower() == 'connection' and value.lower() == 'close':\n"
    "            return\n"
    "        super().send_header(keyword, value)\n"
    "def guarded(app):\n"
    "    def call(environ, start_response):\n"
    "        try:\n"
    "            yield from app(environ, start_response)\n"
    "        except BaseException:\n"
    "            environ['floe.app_failed'] = True\n"
    "            raise\n"
    "    return call\n"
    "run_simple = moto.server.run_simple\n"
    "moto.server.run_simple = lambda host, port, app, **options: run_simple(host, port, guarded(app), **options)\n"
    "moto.server.MotoRequestHandler = KeepAlive\n"
    "moto.server.main(sys.argv[1:])\n"
)


def _command(host: str, port: int, service: str | None) -> list[str]:
    if service is None:
        return [sys.executable, "-c", _MOTO_PATCHES, "-H", host, "-p", str(port)]
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
