"""QuotaStore: client quotas in DynamoDB, one item per entity, in ``<prefix>client_quotas``.

Layout: hash key ``entity`` (string), the entity written as Kafka writes its config path parts,
``user=<name>`` and/or ``client-id=<name>`` joined by ``/``, each name percent-encoded (so no name
contains ``/`` or ``=``) and the default entity written ``<default>`` (which percent-encoding can
never produce); ``quotas``, a map of quota key to number; ``version``, bumped by every write and the
condition of the next one (read-merge-write, retried when another writer won; ``broker_core.retry``).
An entity whose last quota is removed is deleted.

Brokers do not poll this table: after a change the writer bumps the cluster's metadata version
(``MetadataStore.bump_metadata_version``), and every broker re-reads the quotas (one consistent
Scan) when it applies the new metadata, so a change holds on every broker within one metadata poll.

Thread-safety: no mutable state; pynamodb is synchronous, so brokers call it from worker threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PynamoDBException
from pynamodb.models import Model

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import (
    bind_model,
    condition_failed,
    ensure_tables,
    failures_as,
    share_connection,
)
from broker_core.retry import LostRace, retry_lost_races

from .entities import CLIENT_ID, DEFAULT, USER, ClientQuotas, QuotaEntity

QUOTAS_TABLE = "client_quotas"
_DEFAULT_TEXT = "<default>"


class QuotaStoreError(Exception):
    """Base of the quota store's errors."""


class QuotaStoreUnavailableError(QuotaStoreError):
    """DynamoDB could not be reached, or writers kept racing for one entity past the retries."""


_unavailable_on_error = failures_as(QuotaStoreUnavailableError, QuotaStoreError)


class ClientQuotaItem(Model):
    entity = UnicodeAttribute(hash_key=True)
    quotas = MapAttribute(default=dict)
    version = NumberAttribute(default=0)


def entity_key(entity: QuotaEntity) -> str:
    parts = []
    for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if name is not None:
            parts.append(f"{kind}={_DEFAULT_TEXT if name is DEFAULT else quote(name, safe='')}")
    return "/".join(parts)


def entity_from_key(key: str) -> QuotaEntity:
    found: dict[str, object] = {}
    for part in key.split("/"):
        kind, _, text = part.partition("=")
        found[kind] = DEFAULT if text == _DEFAULT_TEXT else unquote(text)
    return QuotaEntity(found.get(USER), found.get(CLIENT_ID))  # type: ignore[arg-type]


def _values(item: ClientQuotaItem) -> dict[str, float]:
    return {str(k): float(v) for k, v in item.quotas.as_dict().items()}


class QuotaStore:
    """Client quotas in one DynamoDB table (see the module doc)."""

    def __init__(self, settings: AwsSettings) -> None:
        self.model: type[ClientQuotaItem] = bind_model(ClientQuotaItem, settings, QUOTAS_TABLE)
        # one observed client: its calls count in the DynamoDB call metrics (broker_core.metrics.aws_calls)
        share_connection([self.model], settings)

    @_unavailable_on_error
    def ensure_table(self) -> None:
        """Create the table if missing and wait until it is ACTIVE; safe from several brokers at once."""
        ensure_tables([self.model], QuotaStoreUnavailableError)

    @_unavailable_on_error
    def load(self) -> ClientQuotas:
        """Every stored quota (a consistent Scan)."""
        by_entity = {}
        for item in self.model.scan(consistent_read=True):
            values = _values(item)
            if values:
                by_entity[entity_from_key(item.entity)] = values
        return ClientQuotas(by_entity)

    @_unavailable_on_error
    def alter(self, entity: QuotaEntity, set_values: Mapping[str, float], remove: Iterable[str]) -> None:
        """Set and remove quotas of one entity (read-merge-write on ``version``); callers validated them."""
        removed = set(remove)

        def attempt() -> None:
            key = entity_key(entity)
            try:
                item = self.model.get(key, consistent_read=True)
                current = _values(item)
                version = int(item.version)
            except self.model.DoesNotExist:
                current, version = {}, None
            merged = {k: v for k, v in current.items() if k not in removed}
            merged.update(set_values)
            if merged == current and version is not None:
                return
            condition = (self.model.version == version) if version is not None else self.model.entity.does_not_exist()
            try:
                if merged:
                    self.model(key, quotas=merged, version=(version or 0) + 1).save(condition=condition)
                elif version is not None:
                    self.model(key).delete(condition=condition)
            except PynamoDBException as err:
                if condition_failed(err):
                    raise LostRace(f"quota entity {key} changed") from err
                raise

        retry_lost_races(attempt, lambda attempts: QuotaStoreUnavailableError(
            f"quota entity {entity} kept changing during {attempts} attempts"))
