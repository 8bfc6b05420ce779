"""A metering proxy in front of moto: every S3 and DynamoDB request the local stack makes, counted as AWS bills it.

`AwsMeter` listens on loopback and forwards each request unchanged to a moto server, then records
it under the current phase (`AwsMeter.phase`): S3 requests by operation (PutObject, UploadPart,
GetObject, ListObjectsV2, ...) with the bytes sent and received, and DynamoDB requests by table and
operation with the capacity units DynamoDB would charge. moto answers every request with the same
made-up ConsumedCapacity, so the units are computed here from the items themselves, by DynamoDB's
rules (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html):

- a read costs ceil(size / 4 KB) units, half of that when eventually consistent; GetItem and
  BatchGetItem charge each item on its own, Query and Scan the sum of the items returned; a read
  that finds nothing still costs one unit (half when eventually consistent);
- a write costs ceil(size / 1 KB) units, at least one: PutItem the item written; UpdateItem the
  item after the update when the answer carries it (ReturnValues ALL_NEW, pynamodb's default),
  otherwise the key and the values the request sets (a lower bound for items over 1 KB); DeleteItem
  the deleted item when returned, otherwise one unit;
- transactions (TransactWriteItems, TransactGetItems) cost twice the units of their items.

Item sizes follow DynamoDB's item size rules (attribute name bytes plus value bytes: strings in
UTF-8, numbers (digits + 1) / 2 + 1 bytes, binary as decoded, lists and maps 3 bytes plus their
elements). Requests to the moto control API (``/moto-api/``) are forwarded and not counted.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}
READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024

# S3 request classes as billed: PUT, COPY, POST and LIST are one price; GET and every other request
# another; DELETE (and abort) requests are free.
S3_PUT_CLASS = {"PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
                "ListObjectsV2", "ListObjects", "ListMultipartUploads", "ListParts", "DeleteObjects",
                "CreateBucket", "PutBucketConfig"}
S3_FREE = {"DeleteObject", "AbortMultipartUpload"}


def value_size(value: dict[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value in its JSON wire form."""
    (kind, data), = value.items()
    if kind == "S":
        return len(data.encode("utf-8"))
    if kind == "N":
        digits = len(data.lstrip("-").replace(".", "").lstrip("0")) or 1
        return (digits + 1) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(data))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(item.encode("utf-8")) for item in data)
    if kind == "NS":
        return sum(value_size({"N": item}) for item in data)
    if kind == "BS":
        return sum(len(base64.b64decode(item)) for item in data)
    if kind == "L":
        return 3 + sum(1 + value_size(item) for item in data)
    if kind == "M":
        return 3 + sum(len(name.encode("utf-8")) + 1 + value_size(item) for name, item in data.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: dict[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def write_units(size: int) -> float:
    return float(max(1, math.ceil(size / WRITE_UNIT_BYTES)))


@dataclass
class Tally:
    requests: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    bytes_sent: int = 0  # request bodies, client -> AWS
    bytes_received: int = 0  # response bodies, AWS -> client

    def add(self, other: Tally) -> None:
        self.requests += other.requests
        self.read_units += other.read_units
        self.write_units += other.write_units
        self.bytes_sent += other.bytes_sent
        self.bytes_received += other.bytes_received

    def as_dict(self) -> dict[str, float]:
        return {"requests": self.requests, "read_units": round(self.read_units, 1),
                "write_units": round(self.write_units, 1), "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received}


@dataclass
class PhaseCounters:
    """What one phase of a run cost: S3 by operation, DynamoDB by (table, operation)."""

    s3: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    dynamodb: dict[tuple[str, str], Tally] = field(default_factory=lambda: defaultdict(Tally))

    def as_dict(self) -> dict[str, Any]:
        tables: dict[str, dict[str, Any]] = defaultdict(dict)
        for (table, operation), tally in sorted(self.dynamodb.items()):
            tables[table][operation] = tally.as_dict()
        return {"s3": {operation: tally.as_dict() for operation, tally in sorted(self.s3.items())},
                "dynamodb": dict(tables)}


def s3_operation(method: str, target: str, headers: dict[str, str]) -> str:
    """The S3 API operation of a path-style request."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    has_key = len([segment for segment in parts.path.split("/") if segment]) >= 2
    if method == "PUT":
        if "partNumber" in query:
            return "UploadPart"
        if not has_key:
            return "CreateBucket" if not query else "PutBucketConfig"
        return "CopyObject" if "x-amz-copy-source" in headers else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "delete" in query:
            return "DeleteObjects"
        return "PostObject"
    if method == "GET":
        if has_key:
            return "ListParts" if "uploadId" in query else "GetObject"
        if "uploads" in query:
            return "ListMultipartUploads"
        return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else ("DeleteObject" if has_key else "DeleteBucket")
    return method


def _write_item_units(operation: str, request: dict[str, Any], answer: dict[str, Any]) -> float:
    if operation == "PutItem":
        return write_units(item_size(request.get("Item")))
    if operation == "UpdateItem":
        if answer.get("Attributes") and request.get("ReturnValues") == "ALL_NEW":
            return write_units(item_size(answer["Attributes"]))
        written = item_size(request.get("Key")) + sum(
            value_size(value) for value in (request.get("ExpressionAttributeValues") or {}).values())
        return write_units(written)
    if operation == "DeleteItem":
        return write_units(item_size(answer.get("Attributes")))
    return 0.0


def dynamodb_charges(operation: str, request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Tally]:
    """Capacity units per table of one DynamoDB request and its answer."""
    charges: dict[str, Tally] = defaultdict(Tally)
    consistent = bool(request.get("ConsistentRead"))
    table = request.get("TableName", "")
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        charges[table].write_units += _write_item_units(operation, request, answer)
    elif operation == "GetItem":
        charges[table].read_units += read_units(item_size(answer.get("Item")), consistent)
    elif operation in ("Query", "Scan"):
        size = sum(item_size(item) for item in answer.get("Items", []))
        charges[table].read_units += read_units(size, consistent)
    elif operation == "BatchGetItem":
        for name, items in (answer.get("Responses") or {}).items():
            wanted = request["RequestItems"].get(name, {})
            for item in items:
                charges[name].read_units += read_units(item_size(item), bool(wanted.get("ConsistentRead")))
    elif operation == "BatchWriteItem":
        for name, writes in request.get("RequestItems", {}).items():
            for write in writes:
                put = write.get("PutRequest")
                charges[name].write_units += write_units(item_size(put["Item"]) if put else 0)
    elif operation == "TransactWriteItems":
        for entry in request.get("TransactItems", []):
            (kind, body), = entry.items()
            size = item_size(body.get("Item")) if kind == "Put" else item_size(body.get("Key"))
            if kind == "Update":
                size += sum(value_size(v) for v in (body.get("ExpressionAttributeValues") or {}).values())
            charges[body["TableName"]].write_units += 2 * write_units(size)
    elif operation == "TransactGetItems":
        for entry, found in zip(request.get("TransactItems", []), answer.get("Responses", []), strict=False):
            charges[entry["Get"]["TableName"]].read_units += 2 * read_units(item_size(found.get("Item")), True)
    if not charges:
        charges[table]  # control-plane calls (DescribeTable, CreateTable, ...): a request, no units
    return charges


class AwsMeter:
    """The proxy: ``endpoint_url`` is what the stack should use instead of moto's own."""

    def __init__(self, upstream_host: str, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.phase = "start"
        self.phases: dict[str, PhaseCounters] = defaultdict(PhaseCounters)
        self._lock = threading.Lock()
        meter = self

        class Handler(_ForwardingHandler):
            owner = meter

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="aws-meter", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> AwsMeter:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record_s3(self, operation: str, sent: int, received: int) -> None:
        with self._lock:
            tally = self.phases[self.phase].s3[operation]
            tally.requests += 1
            tally.bytes_sent += sent
            tally.bytes_received += received

    def record_dynamodb(self, operation: str, request: dict[str, Any], answer: dict[str, Any], status: int,
                        sent: int, received: int) -> None:
        charges = dynamodb_charges(operation, request, answer) if status == 200 else {}
        # A conditional write that fails still consumes its write units; other errors cost nothing here.
        if status == 400 and answer.get("__type", "").endswith("ConditionalCheckFailedException"):
            charges = {request.get("TableName", ""): Tally(write_units=write_units(item_size(request.get("Item"))))}
        if not charges:  # a failed request: counted under the (first) table it named
            items = request.get("TransactItems") or [{}]
            named = request.get("TableName") or next(iter(items[0].values()), {}).get("TableName", "")
            charges = {named: Tally()}
        with self._lock:
            counters = self.phases[self.phase].dynamodb
            first = True
            for table, tally in charges.items():
                target = counters[(table, operation)]
                target.read_units += tally.read_units
                target.write_units += tally.write_units
                if first:  # one request, bytes counted once, under its first table
                    target.requests += 1
                    target.bytes_sent += sent
                    target.bytes_received += received
                    first = False

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {phase: counters.as_dict() for phase, counters in self.phases.items()}


class _ForwardingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: AwsMeter
    _local = threading.local()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Requests are counted, not logged."""

    def _upstream(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection(*self.owner.upstream, timeout=300)
        return connection

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self) -> None:
        body = self._body()
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        try:
            connection = self._upstream()
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException):
            self._local.connection = None
            connection = self._upstream()
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and (name.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)
        self._count(body, response.status, answer)

    def _count(self, body: bytes, status: int, answer: bytes) -> None:
        if self.path.startswith("/moto-api"):
            return
        target = self.headers.get("X-Amz-Target") or ""
        if target.startswith("DynamoDB_"):
            operation = target.split(".", 1)[1]
            try:
                request = json.loads(body or b"{}")
                answered = json.loads(answer or b"{}")
            except ValueError:
                request, answered = {}, {}
            self.owner.record_dynamodb(operation, request, answered, status, len(body), len(answer))
        elif not target:
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.owner.record_s3(s3_operation(self.command, self.path, headers), len(body), len(answer))

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward
