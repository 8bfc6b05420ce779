"""MetadataTables: the four cluster-metadata tables, their transactions and the metadata version.

The base of every part of the metadata store (``broker_core.metadata.brokers``, ``.topics``,
``.producer_ids``, assembled in ``broker_core.metadata.store``): it binds the pynamodb models to one
deployment, creates the tables, and runs transactions. Every metadata change bumps the metadata
version in the same DynamoDB transaction (`add_version_bump`), so a broker that sees the version
unchanged knows nothing it caches has changed; controller writes also carry a condition check on the
controller lease's epoch (`add_controller_check`). Transactions that conflict with others or are
throttled are retried with bounded, jittered backoff (``broker_core.retry``) and surface as
MetadataConflictError when the retries run out; DynamoDB failures that no condition explains surface
as MetadataUnavailableError (`metadata_failures`).

Thread-safety: holds no mutable state of its own and may be shared by threads; pynamodb is
synchronous, so brokers call it from worker threads, never from the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import ensure_tables, failures_as, transact
from broker_core.metadata.errors import MetadataConflictError, MetadataError, MetadataUnavailableError
from broker_core.metadata.models import CONTROLLER_ITEM, METADATA_VERSION_ITEM, BoundModels, bind_models

metadata_failures = failures_as(MetadataUnavailableError, MetadataError)
"""Decorator of store methods: pynamodb/botocore failures become MetadataUnavailableError."""


class MetadataTables:
    """Cluster metadata in four DynamoDB tables named ``settings.table_prefix`` + base name."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models: BoundModels = bind_models(settings)

    # -- tables ------------------------------------------------------------------------------

    @metadata_failures
    def ensure_tables(self) -> None:
        """Create any missing metadata table (on-demand billing) and wait until all are ACTIVE.

        Safe to call from several brokers at once: a table another broker is creating is waited for.
        """
        ensure_tables(self.models.one_model_per_table(), MetadataUnavailableError)

    # -- transactions ------------------------------------------------------------------------

    def transact(self, what: str, build: Callable[[TransactWrite], None]) -> list[str | None] | None:
        """Run the transaction ``build`` fills; None when it committed.

        When a condition failed, returns the cancellation code of each item in the order ``build``
        added them ("ConditionalCheckFailed" for the failed ones, None for the others); nothing was
        written. Conflicts with other transactions and throttling are retried with backoff; when
        they outlast the retries, MetadataConflictError names ``what``.
        """
        return transact(self.models.connection, build, lambda attempts: MetadataConflictError(what, attempts))

    def add_controller_check(self, transaction: TransactWrite, controller_epoch: int) -> None:
        """Make ``transaction`` conditional on the controller lease still carrying ``controller_epoch``."""
        lease = self.models.controller_lease
        transaction.condition_check(
            lease, CONTROLLER_ITEM, condition=lease.controller_epoch == controller_epoch
        )

    def add_version_bump(self, transaction: TransactWrite) -> None:
        version = self.models.metadata_version
        transaction.update(version(METADATA_VERSION_ITEM), actions=[version.version.add(1)])

    # -- metadata version --------------------------------------------------------------------

    @metadata_failures
    def metadata_version(self) -> int:
        """The current metadata version (consistent read); 0 before the first change."""
        version = self.models.metadata_version
        try:
            return int(version.get(METADATA_VERSION_ITEM, consistent_read=True).version)
        except version.DoesNotExist:
            return 0

    @metadata_failures
    def bump_metadata_version(self) -> int:
        """Bump the metadata version on its own (atomic ADD) and return the new value."""
        version = self.models.metadata_version
        item = version(METADATA_VERSION_ITEM)
        item.update(actions=[version.version.add(1)])
        return int(item.version)
