"""Client quotas on the HTTP front end: Kafka's byte-rate quotas per IAM principal, across every Lambda.

Which quota applies is the brokers' answer: the same ``client_quotas`` table (`broker_core.quotas.store`),
the same entities and precedence (`ClientQuotas.resolve`), with the caller's principal name (its IAM
ARN, `functions.caller`) as the user and an empty client id (the HTTP API takes none, so besides user
entities only ``<default>`` client-id entities apply, and every HTTP caller they cover shares one
budget, as Kafka clients that send no client id do). ``producer_byte_rate`` counts request bodies of
produce calls, ``consumer_byte_rate`` the JSON answers of fetch calls (Kafka counts whole requests and
whole responses). The quotas are read once per ``QUOTAS_TTL_S`` per container, so a change holds on
the API within that time; a read that fails keeps the quotas the container had (none at first),
logged, as a broker keeps its quotas when a reload fails.

How the rate is measured, when a Lambda instance sees only its own requests and there are many:
one token bucket per (quota key, client group) in DynamoDB (``<prefix>http_quota_buckets``), shared
by every instance. It holds up to ``BURST_S`` seconds of the quota and refills at the quota; a
request is let through while the bucket is not in debt and takes its bytes from it (so one request
larger than the bucket still passes, and the debt it leaves is paid back before the next one, as
Kafka records a request and then throttles), and is refused with 429 while it is in debt, with
``Retry-After`` the seconds until it is not. A produce is refused before anything is sent; a fetch
is checked before reading and charged after, and reads no more than the bucket holds (at least
one batch). Each charge is a read and a write conditional on the item's ``version`` (retried when
another instance won), so every byte is counted once whatever the number of instances: the
accepted rate over any period T is at most quota * T + the bucket + one request, and a client
that keeps the bucket busy gets the quota. What it costs: a consistent GetItem and a conditional
PutItem per request under a quota (nothing for callers no quota covers); and the clocks of the
instances (NTP-synchronised on Lambda), since a bucket's refill is computed from wall-clock time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import quote

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PynamoDBException
from pynamodb.models import Model

from broker_core.aws import AwsSettings
from broker_core.clock import wall_clock_ms
from broker_core.dynamodb_tables import (
    bind_model,
    condition_failed,
    ensure_tables,
    failures_as,
    share_connection,
)
from broker_core.quotas.entities import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    QuotaMatch,
    client_identity,
)
from broker_core.quotas.store import QuotaStore, QuotaStoreError
from broker_core.retry import LostRace, retry_lost_races
from functions.errors import ApiError
from functions.telemetry import logger

BUCKETS_TABLE = "http_quota_buckets"
QUOTAS_TTL_S = 5.0
BURST_S = 1.0
# An idle bucket is full again after BURST_S; its item is left to DynamoDB's TTL after an hour.
_IDLE_EXPIRY_S = 3600


class QuotaUnavailableError(Exception):
    """The bucket table could not be reached, or instances kept racing for one bucket past the retries."""


_unavailable_on_error = failures_as(QuotaUnavailableError, QuotaUnavailableError)


class QuotaBucketItem(Model):
    bucket = UnicodeAttribute(hash_key=True)
    tokens = NumberAttribute()
    updated_ms = NumberAttribute()
    version = NumberAttribute()
    expiration = NumberAttribute()


@dataclass(frozen=True)
class Allowance:
    """What a caller may take now: ``tokens`` bytes (may exceed a request; None: no quota applies)."""

    tokens: float | None


def _bucket_key(key: str, match: QuotaMatch) -> str:
    user, client_id = match.group
    return f"{key}|{quote(user, safe='')}|{quote(client_id, safe='')}"


def too_many_requests(key: str, match: QuotaMatch, debt: float) -> ApiError:
    wait_s = debt / match.limit
    return ApiError(HTTPStatus.TOO_MANY_REQUESTS,
                    f"over the {key} quota of {int(match.limit)} bytes/s; retry after the time in Retry-After",
                    quota=key, retry_after_ms=math.ceil(wait_s * 1000),
                    headers={"Retry-After": str(max(1, math.ceil(wait_s)))})


class HttpQuotas:
    """The quotas of one container and the shared buckets they are measured with (see the module doc)."""

    def __init__(self, settings: AwsSettings) -> None:
        self.store = QuotaStore(settings)
        self.model: type[QuotaBucketItem] = bind_model(QuotaBucketItem, settings, BUCKETS_TABLE)
        # one observed client: its calls count in the DynamoDB call metrics (broker_core.metrics.aws_calls)
        share_connection([self.model], settings)
        self._quotas = ClientQuotas()
        self._loaded_at = -math.inf

    @_unavailable_on_error
    def ensure_table(self) -> None:
        ensure_tables([self.model], QuotaUnavailableError)

    def _current(self) -> ClientQuotas:
        now = time.monotonic()
        if now - self._loaded_at >= QUOTAS_TTL_S:
            self._loaded_at = now
            try:
                self._quotas = self.store.load()
            except QuotaStoreError as exc:
                logger.warning("client quotas were not reloaded (the previous ones stay in force)",
                               extra={"error": str(exc)})
        return self._quotas

    def _match(self, principal: str, key: str) -> QuotaMatch | None:
        quotas = self._current()
        if not quotas.has_key(key):
            return None
        return quotas.resolve(client_identity(None, principal), key)

    def admit(self, principal: str, key: str) -> Allowance:
        """What ``principal`` may take under ``key`` now; ApiError 429 while its bucket is in debt."""
        match = self._match(principal, key)
        if match is None:
            return Allowance(None)
        tokens = self._tokens(_bucket_key(key, match), match.limit)
        if tokens < 0:
            raise too_many_requests(key, match, -tokens)
        return Allowance(tokens)

    def charge(self, principal: str, key: str, nbytes: int) -> None:
        """Take ``nbytes`` from ``principal``'s bucket (after `admit` let the request through)."""
        match = self._match(principal, key)
        if match is not None:
            self._take(_bucket_key(key, match), match.limit, nbytes)

    def admit_and_charge(self, principal: str, key: str, nbytes: int) -> None:
        """`admit` and `charge` in one conditional write: 429 (nothing taken) while the bucket is in debt."""
        match = self._match(principal, key)
        if match is not None:
            debt = self._take(_bucket_key(key, match), match.limit, nbytes, refuse_in_debt=True)
            if debt > 0:
                raise too_many_requests(key, match, debt)

    def produce(self, principal: str, nbytes: int) -> None:
        self.admit_and_charge(principal, PRODUCER_BYTE_RATE, nbytes)

    def fetch_allowance(self, principal: str) -> Allowance:
        return self.admit(principal, CONSUMER_BYTE_RATE)

    def fetched(self, principal: str, nbytes: int) -> None:
        self.charge(principal, CONSUMER_BYTE_RATE, nbytes)

    # the bucket ------------------------------------------------------------------------------

    @staticmethod
    def _refilled(item: QuotaBucketItem | None, quota: float, now_ms: int) -> float:
        burst = quota * BURST_S
        if item is None:
            return burst
        elapsed_s = max(0, now_ms - int(item.updated_ms)) / 1000
        return min(burst, float(item.tokens) + quota * elapsed_s)

    @_unavailable_on_error
    def _tokens(self, key: str, quota: float) -> float:
        try:
            item = self.model.get(key, consistent_read=True)
        except self.model.DoesNotExist:
            item = None
        return self._refilled(item, quota, wall_clock_ms())

    @_unavailable_on_error
    def _take(self, key: str, quota: float, nbytes: int, *, refuse_in_debt: bool = False) -> float:
        """Take ``nbytes`` (read-refill-write on ``version``); 0, or the debt that refused it."""

        def attempt() -> float:
            try:
                item = self.model.get(key, consistent_read=True)
            except self.model.DoesNotExist:
                item = None
            now_ms = wall_clock_ms()
            tokens = self._refilled(item, quota, now_ms)
            if refuse_in_debt and tokens < 0:
                return -tokens
            version = int(item.version) if item is not None else 0
            condition = (self.model.version == version) if item is not None else self.model.bucket.does_not_exist()
            updated_ms = max(now_ms, int(item.updated_ms)) if item is not None else now_ms
            try:
                self.model(key, tokens=tokens - nbytes, updated_ms=updated_ms, version=version + 1,
                           expiration=now_ms // 1000 + _IDLE_EXPIRY_S).save(condition=condition)
            except PynamoDBException as err:
                if condition_failed(err):
                    raise LostRace(f"quota bucket {key} changed") from err
                raise
            return 0.0

        return retry_lost_races(attempt, lambda attempts: QuotaUnavailableError(
            f"quota bucket {key} kept changing during {attempts} attempts"))
