"""The local HTTP adapter: the front ends' Lambda handler served on loopback, as API Gateway would call it.

Each HTTP request becomes an API Gateway HTTP API event (payload format 2.0: rawPath,
rawQueryString, lower-cased headers with repeated ones joined by commas, cookies,
queryStringParameters, requestContext.http, a body that is base64 when it is not UTF-8) and is
handed to `functions.app.lambda_handler` with a Lambda-like context; the handler's answer becomes
the HTTP response. Where API Gateway checks IAM signatures, the adapter checks a bearer token
(``Authorization: Bearer <token>``), the one `floe local up` writes into stack.json; like API
Gateway it refuses bodies over 10 MB itself (the handler refuses those over Lambda's 6 MB). As API
Gateway puts the signer's ARN in ``requestContext.authorizer.iam``, the adapter puts the ARN its
caller's token stands for: the stack's token is ``LOCAL_CALLER_ARN``, and FLOE_HTTP_CALLERS may
name more callers, a JSON object of token to ARN (so several identities can be tried locally, each
with a secret of its own; a caller can never pick its ARN by what it sends).

Like Lambda, which gives each concurrent invocation a container of its own, the adapter runs
``--workers`` processes (default 4) that share the listening socket, each serving one request at a
time (Powertools' resolver keeps the current request in class attributes, so one process must not
serve two at once). Every answer closes its connection, so an idle client never holds a worker.
Run it as
``python -m functions.local_adapter --port 0 --ready-file F`` with the token in FLOE_HTTP_TOKEN
and the cluster settings in the environment (FLOE_BOOTSTRAP_SERVERS, FLOE_AWS_ENDPOINT_URL, ...);
it creates the front ends' tables, then writes ``{"port", "url", "pid"}`` to the ready file.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hmac
import json
import logging
import os
import signal
import socket
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

ENV_TOKEN = "FLOE_HTTP_TOKEN"
ENV_CALLERS = "FLOE_HTTP_CALLERS"
LOCAL_CALLER_ARN = "arn:aws:iam::000000000000:user/floe-local"
API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
LAMBDA_TIMEOUT_S = 30.0
_DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
DEFAULT_WORKERS = 4
_ACCOUNT_ID = "000000000000"
_API_ID = "floelocal"
_FUNCTION_NAME = "floe-http-local"

log = logging.getLogger("floe.local_adapter")

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass
class LocalLambdaContext:
    """The parts of Lambda's context object the handler reads."""

    aws_request_id: str
    region: str
    function_name: str = _FUNCTION_NAME
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    log_group_name: str = f"/aws/lambda/{_FUNCTION_NAME}"
    log_stream_name: str = "local"
    deadline: float = field(default_factory=lambda: time.monotonic() + LAMBDA_TIMEOUT_S)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{_ACCOUNT_ID}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def api_gateway_event(method: str, target: str, headers: list[tuple[str, str]], body: bytes, *,
                      source_ip: str = "127.0.0.1", request_id: str | None = None,
                      now: datetime.datetime | None = None, caller_arn: str | None = None) -> dict[str, Any]:
    """The API Gateway HTTP API (payload 2.0) event for one request, signed by ``caller_arn`` if given."""
    raw_path, _, raw_query = target.partition("?")
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        name = name.lower()
        if name == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        joined[name] = f"{joined[name]},{value}" if name in joined else value
    query: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    now = now or datetime.datetime.now(datetime.UTC)
    request_id = request_id or uuid.uuid4().hex
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": joined,
        "requestContext": {
            "accountId": _ACCOUNT_ID,
            "apiId": _API_ID,
            "domainName": joined.get("host", "localhost"),
            "domainPrefix": _API_ID,
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                     "userAgent": joined.get("user-agent", "")},
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if caller_arn is not None:
        account = caller_arn.split(":")[4] if caller_arn.count(":") >= 5 else _ACCOUNT_ID
        event["requestContext"]["authorizer"] = {"iam": {
            "accessKey": "", "accountId": account, "callerId": "", "principalOrgId": None,
            "userArn": caller_arn, "userId": "", "cognitoIdentity": None}}
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
    return event


class LocalApiServer(HTTPServer):
    """One "container": serves one request at a time on a listening socket, invoking ``handler``
    after checking the bearer token. Several of them (processes) may share one socket."""

    def __init__(self, listening: socket.socket, token: str, handler: Handler, region: str = "us-east-1",
                 callers: dict[str, str] | None = None) -> None:
        if not token:
            raise ValueError("the local adapter needs a non-empty bearer token")
        self.token = token
        # token -> caller ARN; the stack's own token is the local user.
        self.callers = {**(callers or {}), token: LOCAL_CALLER_ARN}
        self.handler = handler
        self.region = region
        super().__init__(listening.getsockname()[:2], _RequestHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = listening

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"


def _json_bytes(status: int, message: str) -> bytes:
    return json.dumps({"error_code": status, "message": message, "errors": []}).encode("utf-8")


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LocalApiServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Requests are not logged one by one (the handler logs); failures are, in _serve."""

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        """Answer and close: a worker then goes back to accepting, so no idle client can hold it."""
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _caller(self) -> str | None:
        """The ARN the request's bearer token stands for, None without a known token."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        presented = token.strip().encode()
        found = None
        for known, arn in self.server.callers.items():  # every token compared, in constant time each
            if hmac.compare_digest(presented, known.encode()):
                found = arn
        return found

    def _serve(self) -> None:
        json_type = {"Content-Type": "application/json"}
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._send(411, json_type, _json_bytes(411, "send a Content-Length; chunked bodies are not accepted"))
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._send(400, json_type, _json_bytes(400, "Content-Length is not a number"))
            return
        if length > API_GATEWAY_MAX_BODY_BYTES:
            left = length if length <= _DRAIN_LIMIT_BYTES else 0
            while left > 0:  # read it, so the client sees the answer rather than a reset connection
                chunk = self.rfile.read(min(1 << 20, left))
                if not chunk:
                    break
                left -= len(chunk)
            self._send(413, json_type, _json_bytes(413, f"the body is {length} bytes; API Gateway takes at most "
                                                        f"{API_GATEWAY_MAX_BODY_BYTES}"))
            return
        body = self.rfile.read(length) if length else b""
        caller = self._caller()
        if caller is None:
            self._send(401, {**json_type, "WWW-Authenticate": "Bearer"},
                       _json_bytes(401, "missing or wrong bearer token (see the http.token of stack.json)"))
            return
        event = api_gateway_event(self.command, self.path, list(self.headers.items()), body,
                                  source_ip=self.client_address[0], caller_arn=caller)
        context = LocalLambdaContext(aws_request_id=event["requestContext"]["requestId"], region=self.server.region)
        try:
            answer = self.server.handler(event, context)
        except Exception:
            log.error("%s %s failed:\n%s", self.command, self.path, traceback.format_exc())
            self._send(500, json_type, _json_bytes(500, "Internal Server Error"))
            return
        payload = answer.get("body") or ""
        data = base64.b64decode(payload) if answer.get("isBase64Encoded") else payload.encode("utf-8")
        headers = {str(k): str(v) for k, v in (answer.get("headers") or {}).items()}
        for name, values in (answer.get("multiValueHeaders") or {}).items():
            headers[str(name)] = ",".join(str(v) for v in values)
        status = int(answer.get("statusCode", 200))
        if status >= 500:
            log.warning("%s %s answered %d: %s", self.command, self.path, status, data[:500])
        self._send(status, headers, data)

    def __getattr__(self, name: str) -> Any:
        # Every method goes to the handler, as API Gateway's $default route sends every method on.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)


def _quiet_powertools() -> None:
    """Locally there is no X-Ray daemon and no CloudWatch agent: tracing and metrics are off."""
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", _FUNCTION_NAME)


def _serve_in_child(listening: socket.socket, token: str, handler: Handler, region: str,
                    callers: dict[str, str]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        LocalApiServer(listening, token, handler, region, callers).serve_forever()
    finally:
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="floe-http-local", description="Serve Floe's HTTP API on loopback")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"concurrent invocations, one process each (default {DEFAULT_WORKERS})")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help='write {"port", "url", "pid"} here once requests are served')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [http %(process)d] %(name)s: %(message)s")
    token = os.environ.get(ENV_TOKEN, "")
    if not token:
        parser.error(f"{ENV_TOKEN} must hold the bearer token clients will send")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    try:
        callers = json.loads(os.environ.get(ENV_CALLERS) or "{}")
    except json.JSONDecodeError:
        parser.error(f"{ENV_CALLERS} must be a JSON object of bearer token to caller ARN")
    if not isinstance(callers, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v.startswith("arn:") for k, v in callers.items()):
        parser.error(f"{ENV_CALLERS} must be a JSON object of non-empty bearer token to caller ARN")
    _quiet_powertools()
    from functions import runtime, tables
    from functions.app import lambda_handler

    settings = runtime.settings()
    tables.ensure_tables(settings.aws)
    listening = socket.create_server((args.host, args.port), backlog=256)
    url = f"http://{args.host}:{listening.getsockname()[1]}"
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers: set[int] = set()

    def spawn() -> None:
        pid = os.fork()
        if pid == 0:
            _serve_in_child(listening, token, lambda_handler, settings.aws.region, callers)
        workers.add(pid)

    for _ in range(args.workers):
        spawn()
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": listening.getsockname()[1], "url": url, "pid": os.getpid()}))
        tmp.rename(args.ready_file)
    log.info("serving %s with %d workers", url, args.workers)
    while not stopping:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
        if pid in workers:
            workers.discard(pid)
            log.error("worker %d exited (status %d); starting another", pid, status)
            spawn()
        time.sleep(0.2)
    for pid in workers:
        os.kill(pid, signal.SIGTERM)
    for pid in workers:
        os.waitpid(pid, 0)
    listening.close()


if __name__ == "__main__":
    main()
