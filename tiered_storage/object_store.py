"""S3 access for tiered storage from inside the broker's event loop: aioboto3 calls with retries.

Every call the uploader, the remote reader and remote retention make to S3 goes through
`SegmentObjectStore`, which never blocks the event loop: requests are aioboto3 coroutines and file
reads for uploads run in worker threads. Errors S3 says are transient (throttling such as SlowDown,
5xx, request timeouts) and connection failures are retried by Floe's one retry helper
(``broker_core.retry``: capped exponential backoff and full jitter, as AWS recommends) with S3's own
budget, ``S3_RETRIES``. botocore's own retries are turned off here, unlike for DynamoDB: the retry
must wrap a whole call (a GetObject includes reading its body, which botocore's retries do not
cover), it must also hold for any client with aioboto3's coroutines (tests inject failing ones), and
each part of a multipart upload is retried on its own with this module's list of retriable errors. Any other error (NoSuchBucket, AccessDenied, ...) surfaces at once as ObjectStoreError.
Large uploads use multipart upload with parts sent concurrently, each part retried on its own; a
multipart upload that fails is aborted so that no parts linger.

An ``observer`` (the broker's metrics) hears of each operation once it ends: its name, its seconds
with every retry, and whether it failed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import aioboto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from broker_core.aws import AwsSettings
from broker_core.retry import RetryPolicy

log = logging.getLogger(__name__)

MIB = 1024 * 1024
MIN_PART_BYTES = 5 * MIB  # S3's smallest part, except the last

_RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
    }
)
_CONNECTION_ERRORS = (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError)

_T = TypeVar("_T")


class ObjectStoreError(Exception):
    """An S3 request failed for good: a non-retriable error, or retries exhausted. ``key`` names the object."""

    def __init__(self, operation: str, key: str, cause: BaseException) -> None:
        super().__init__(f"S3 {operation} of {key!r} failed: {cause}")
        self.operation = operation
        self.key = key
        self.cause = cause


S3_RETRIES = RetryPolicy(attempts=8, base_s=0.05, cap_s=5.0)
"""S3's budget: more patience than DynamoDB's lost races, since SlowDown asks for seconds of backoff."""


@dataclass(frozen=True)
class UploadTuning:
    """When an upload goes multipart, how big its parts are and how many are in flight at once."""

    multipart_threshold_bytes: int = 32 * MIB
    part_bytes: int = 8 * MIB
    part_concurrency: int = 4

    def __post_init__(self) -> None:
        if self.part_bytes < MIN_PART_BYTES:
            raise ValueError(f"part size {self.part_bytes} is below S3's minimum of {MIN_PART_BYTES}")
        if self.part_concurrency < 1 or self.multipart_threshold_bytes < 1:
            raise ValueError("part concurrency and multipart threshold must be positive")


def is_retriable(error: BaseException) -> bool:
    """Whether S3 or the network says this failure may pass on its own."""
    if isinstance(error, _CONNECTION_ERRORS):
        return True
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in _RETRIABLE_CODES or status >= 500
    return False


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class SegmentObjectStore:
    """The cluster bucket seen through one aioboto3 S3 client; use inside ``async with``.

    Thread-safety: an instance belongs to one event loop; its coroutines may run concurrently.
    ``client`` may be any object with aioboto3's S3 client coroutines (tests pass failing fakes).
    """

    def __init__(
        self,
        settings: AwsSettings,
        *,
        retry: RetryPolicy | None = None,
        tuning: UploadTuning | None = None,
        client: Any = None,
        max_pool_connections: int = 32,
        observer: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        self.settings = settings
        self.observer = observer
        self.bucket = settings.bucket
        self.retry = retry or S3_RETRIES
        self.tuning = tuning or UploadTuning()
        self._client = client
        self._max_pool_connections = max_pool_connections
        self._exit_stack: AsyncExitStack | None = None

    async def __aenter__(self) -> SegmentObjectStore:
        if self._client is None:
            self._exit_stack = AsyncExitStack()
            session = aioboto3.Session()
            config = Config(
                retries={"max_attempts": 1, "mode": "standard"},
                max_pool_connections=self._max_pool_connections,
                connect_timeout=5,
                read_timeout=60,
            )
            self._client = await self._exit_stack.enter_async_context(
                session.client("s3", config=config, **self.settings.boto3_kwargs())
            )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._exit_stack is not None:
            await self._exit_stack.aclose()
            self._exit_stack = None
            self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            raise RuntimeError("SegmentObjectStore used outside 'async with'")
        return self._client

    async def _with_retries(self, operation: str, key: str, call: Callable[[], Awaitable[_T]]) -> _T:
        def log_retry(err: BaseException, retry: int, delay: float) -> None:
            log.warning("S3 %s of %s failed (%s); retry %d in %.3fs", operation, key, err, retry, delay)

        started = time.perf_counter()
        try:
            answer = await self.retry.call_async(call, is_retriable, on_retry=log_retry)
        except Exception as err:  # not CancelledError, a BaseException, which passes as it is
            if self.observer is not None:
                self.observer(operation, time.perf_counter() - started, True)
            raise ObjectStoreError(operation, key, err) from err
        if self.observer is not None:
            self.observer(operation, time.perf_counter() - started, False)
        return answer

    # -- writes ------------------------------------------------------------------------------

    async def put_bytes(self, key: str, data: bytes) -> None:
        await self._with_retries(
            "PutObject", key, lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        )

    async def upload_file_range(self, key: str, fd: int, position: int, length: int) -> None:
        """Upload ``length`` bytes of the open file ``fd`` from ``position`` as object ``key``.

        One PutObject below the multipart threshold, else a multipart upload with parts in flight
        concurrently; the file is read in worker threads with ``os.pread`` (``fd`` is not moved).
        """
        if length < self.tuning.multipart_threshold_bytes:
            data = await _pread_fully(fd, length, position)
            await self.put_bytes(key, data)
            return
        await self._multipart_upload(key, fd, position, length)

    async def _multipart_upload(self, key: str, fd: int, position: int, length: int) -> None:
        created = await self._with_retries(
            "CreateMultipartUpload",
            key,
            lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=key),
        )
        upload_id = created["UploadId"]
        part_bytes = self.tuning.part_bytes
        ranges = [(start, min(part_bytes, length - start)) for start in range(0, length, part_bytes)]
        limiter = asyncio.Semaphore(self.tuning.part_concurrency)

        async def send_part(number: int, start: int, size: int) -> dict[str, Any]:
            async with limiter:
                data = await _pread_fully(fd, size, position + start)
                response = await self._with_retries(
                    "UploadPart",
                    key,
                    lambda: self.client.upload_part(
                        Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
                    ),
                )
                return {"PartNumber": number, "ETag": response["ETag"]}

        try:
            parts = await asyncio.gather(
                *(send_part(number, start, size) for number, (start, size) in enumerate(ranges, start=1))
            )
            await self._with_retries(
                "CompleteMultipartUpload",
                key,
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": list(parts)}
                ),
            )
        except BaseException:
            await asyncio.shield(self._abort_multipart(key, upload_id))
            raise

    async def _abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            await self._with_retries(
                "AbortMultipartUpload",
                key,
                lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
            )
        except ObjectStoreError as err:
            log.warning("could not abort multipart upload %s of %s: %s", upload_id, key, err)

    async def delete_objects(self, keys: list[str]) -> None:
        """Delete ``keys`` and abort any multipart upload still open on them; a missing key is not an error."""
        for key in keys:
            uploads = await self._with_retries(
                "ListMultipartUploads",
                key,
                lambda key=key: self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=key),
            )
            for upload in uploads.get("Uploads", []):
                if upload["Key"] == key:
                    await self._abort_multipart(key, upload["UploadId"])
        if not keys:
            return
        response = await self._with_retries(
            "DeleteObjects",
            keys[0],
            lambda: self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True}
            ),
        )
        errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            raise ObjectStoreError("DeleteObjects", errors[0].get("Key", keys[0]), RuntimeError(str(errors)))

    # -- reads -------------------------------------------------------------------------------

    async def get_bytes(self, key: str) -> bytes:
        async def call() -> bytes:
            response = await self.client.get_object(Bucket=self.bucket, Key=key)
            async with response["Body"] as body:
                return await body.read()

        return await self._with_retries("GetObject", key, call)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of ``key`` (fewer if the object ends first)."""
        if length <= 0:
            return b""

        async def call() -> bytes:
            response = await self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )
            async with response["Body"] as body:
                return await body.read()

        return await self._with_retries("GetObject", key, call)

    async def object_size(self, key: str) -> int | None:
        """The object's size, None if there is no such object."""

        async def call() -> int | None:
            try:
                response = await self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as err:
                if _error_code(err) in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
            return int(response["ContentLength"])

        return await self._with_retries("HeadObject", key, call)


async def _pread_fully(fd: int, length: int, position: int) -> bytes:
    def read() -> bytes:
        chunks = []
        remaining, offset = length, position
        while remaining > 0:
            chunk = os.pread(fd, remaining, offset)
            if not chunk:
                raise EOFError(f"file ended {remaining} bytes short of {position + length}")
            chunks.append(chunk)
            remaining -= len(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    return await asyncio.to_thread(read)
