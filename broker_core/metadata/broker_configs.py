"""Dynamic broker configs in DynamoDB: what IncrementalAlterConfigs/AlterConfigs set on BROKER resources.

Kafka keeps them in its metadata log as ConfigRecords; Floe keeps them in one item of the cluster
table (``broker_configs``): a map from resource (``<default>`` for the cluster-wide default, or a
broker id) to that resource's settings, and a ``version``. A change is read-merge-write conditional
on the version, in a transaction that bumps the metadata version, so every broker reads the new
values with its next metadata poll (they travel in the `ClusterSnapshot`). Which settings may be
changed this way, and what they are checked against, is the settings registry's (`broker_core.settings`).

Thread-safety: no state of its own; blocking pynamodb calls, so brokers call it from worker threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pynamodb.transactions import TransactWrite

from broker_core.metadata.errors import MetadataConflictError
from broker_core.metadata.models import BROKER_CONFIGS_ITEM
from broker_core.metadata.tables import MetadataTables, metadata_failures
from broker_core.retry import LostRace, retry_lost_races
from broker_core.settings import DYNAMIC_DEFAULT

DEFAULT_RESOURCE = DYNAMIC_DEFAULT
"""The key of the cluster-wide default (a BROKER resource named "" in Kafka's protocol)."""


class BrokerConfigStore(MetadataTables):
    """The dynamic broker configs item (see the module doc)."""

    def _broker_configs_item(self) -> tuple[dict[str, dict[str, str]], int | None]:
        model = self.models.broker_configs
        try:
            item = model.get(BROKER_CONFIGS_ITEM, consistent_read=True)
        except model.DoesNotExist:
            return {}, None
        stored = item.configs.as_dict() if item.configs is not None else {}
        configs = {str(resource): {str(k): str(v) for k, v in values.items()} for resource, values in stored.items()}
        return configs, int(item.version)

    @metadata_failures
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """Every resource's dynamic settings (consistent read): ``<default>`` and broker ids as strings."""
        return self._broker_configs_item()[0]

    @metadata_failures
    def alter_broker_configs(self, resource: str, set_configs: Mapping[str, str],
                             delete_configs: Iterable[str] = ()) -> dict[str, str]:
        """Set and remove dynamic settings of one resource (``DEFAULT_RESOURCE`` or a broker id) in one
        step; returns the resource's settings after the change. Checking names and values is the
        caller's (the settings registry's)."""
        updates = dict(set_configs)
        removals = list(delete_configs)
        what = f"alter dynamic configs of broker resource {resource}"
        model = self.models.broker_configs

        def attempt() -> dict[str, str]:
            configs, version = self._broker_configs_item()
            mine = dict(configs.get(resource, {}))
            mine.update(updates)
            for key in removals:
                mine.pop(key, None)
            if mine:
                configs[resource] = mine
            else:
                configs.pop(resource, None)

            def build(transaction: TransactWrite) -> None:
                if version is None:
                    transaction.save(model(BROKER_CONFIGS_ITEM, configs=configs, version=1),
                                     condition=model.item.does_not_exist())
                else:
                    transaction.update(model(BROKER_CONFIGS_ITEM),
                                       actions=[model.configs.set(configs), model.version.set(version + 1)],
                                       condition=model.version == version)
                self.add_version_bump(transaction)

            if self.transact(what, build) is not None:
                raise LostRace(what)
            return mine

        return retry_lost_races(attempt, lambda attempts: MetadataConflictError(what, attempts))
