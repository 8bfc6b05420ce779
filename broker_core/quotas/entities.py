"""Quota entities, quota keys and Kafka's precedence order (KIP-55, KIP-257): which quota a client gets.

An entity names a user, a client id, or a (user, client id) pair; either part may be the default
entity (`DEFAULT`), which stands for every user or client id that has no quota of its own. A client
is identified by its principal's name (``User:ANONYMOUS`` until a connection authenticates) and the
client id of its request header. `ClientQuotas.resolve` walks Kafka's
eight levels, most specific first:

    /users/<user>/clients/<client-id>      /users/<default>/clients/<client-id>
    /users/<user>/clients/<default>        /users/<default>/clients/<default>
    /users/<user>                          /users/<default>
                                           /clients/<client-id>
                                           /clients/<default>

and answers the first level that sets the key, with the group of clients that share its budget
(Kafka's metric tags): a quota set on a user alone is shared by all that user's client ids; one set
on a default entity is given separately to each user or client id it covers.

Pure data, no I/O: any thread may use it; a `ClientQuotas` is never changed after it is built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from broker_core.security.principal import ANONYMOUS as ANONYMOUS_PRINCIPAL
from broker_core.security.principal import KafkaPrincipal

USER: Final = "user"
CLIENT_ID: Final = "client-id"
ENTITY_TYPES: Final = (USER, CLIENT_ID)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
# Kafka's quota keys and whether each takes whole numbers only (Kafka declares the byte rates LONG).
QUOTA_KEYS: Final[dict[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

ANONYMOUS_USER: Final = KafkaPrincipal.parse(ANONYMOUS_PRINCIPAL).name


class _Default:
    """The default entity of a type (``<default>`` in Kafka's tools, a null name on the wire)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<default>"


DEFAULT: Final = _Default()
Name = str | _Default


class QuotaEntityError(ValueError):
    """An entity or quota value Kafka would refuse (INVALID_REQUEST); the message says why."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity: a user, a client id or both; None for a part the entity does not name."""

    user: Name | None = None
    client_id: Name | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise QuotaEntityError("a quota entity names a user, a client id, or both")

    @classmethod
    def from_parts(cls, parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """From (entity_type, name-or-None-for-default) pairs, as AlterClientQuotas carries them."""
        found: dict[str, Name] = {}
        for entity_type, name in parts:
            if entity_type not in ENTITY_TYPES:
                raise QuotaEntityError(f"unsupported quota entity type {entity_type!r}; Floe knows "
                                       f"{', '.join(ENTITY_TYPES)}")
            if entity_type in found:
                raise QuotaEntityError(f"duplicate entity type {entity_type!r}")
            found[entity_type] = DEFAULT if name is None else name
        if not found:
            raise QuotaEntityError("a quota entity names a user, a client id, or both")
        return cls(found.get(USER), found.get(CLIENT_ID))

    def parts(self) -> list[tuple[str, str | None]]:
        """(entity_type, name-or-None-for-default) pairs, user first."""
        named = ((USER, self.user), (CLIENT_ID, self.client_id))
        return [(kind, None if name is DEFAULT else name) for kind, name in named if name is not None]

    def __str__(self) -> str:
        return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in self.parts())


def validate_quota(key: str, value: float) -> None:
    """Refuse (QuotaEntityError) a key Kafka does not know or a value it would not store."""
    if key not in QUOTA_KEYS:
        raise QuotaEntityError(f"invalid quota key {key!r}; valid keys are {', '.join(QUOTA_KEYS)}")
    if not math.isfinite(value) or value <= 0:
        raise QuotaEntityError(f"quota {key} must be greater than 0, got {value}")
    if QUOTA_KEYS[key] and value != int(value):
        raise QuotaEntityError(f"quota {key} must be a whole number, got {value}")


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who sent a request, as quotas see it: the principal's user name and the header's client id."""

    user: str = ANONYMOUS_USER
    client_id: str = ""


def client_identity(client_id: str | None, principal: str = ANONYMOUS_PRINCIPAL) -> ClientIdentity:
    """The identity of a request: its header's client id and its principal's name as the user.

    As Kafka, the user entity is the principal's name whatever its type (``User:alice`` is user
    ``alice``, ``User:arn:aws:iam::1:role/r`` is user ``arn:aws:iam::1:role/r``), and an
    unauthenticated connection is user ``ANONYMOUS``, which a ``<default>`` user quota covers like
    any other user.
    """
    return ClientIdentity(KafkaPrincipal.parse(principal).name, client_id or "")


@dataclass(frozen=True, slots=True)
class QuotaMatch:
    """The quota a client gets for one key, and the (user, client id) group that shares its budget
    ("" for a part the group does not split by)."""

    limit: float
    group: tuple[str, str]
    entity: QuotaEntity


@dataclass(frozen=True)
class ClientQuotas:
    """Every configured quota, by entity; immutable, replaced whole when the stored quotas change."""

    by_entity: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(self.by_entity.values())

    def has_key(self, key: str) -> bool:
        return any(key in values for values in self.by_entity.values())

    def resolve(self, identity: ClientIdentity, key: str) -> QuotaMatch | None:
        """The quota ``identity`` gets for ``key`` by Kafka's precedence order, or None if unlimited."""
        user, client = identity.user, identity.client_id
        levels = (
            (QuotaEntity(user, client), (user, client)),
            (QuotaEntity(user, DEFAULT), (user, client)),
            (QuotaEntity(user, None), (user, "")),
            (QuotaEntity(DEFAULT, client), (user, client)),
            (QuotaEntity(DEFAULT, DEFAULT), (user, client)),
            (QuotaEntity(DEFAULT, None), (user, "")),
            (QuotaEntity(None, client), ("", client)),
            (QuotaEntity(None, DEFAULT), ("", client)),
        )
        for entity, group in levels:
            values = self.by_entity.get(entity)
            if values is not None and key in values:
                return QuotaMatch(values[key], group, entity)
        return None
