"""What AlterClientQuotas (API 49) and DescribeClientQuotas (API 48) mean, without I/O.

`parse_alteration` checks one AlterClientQuotas entry as Kafka does: the entity names only user
and/or client-id, each once; every key is one of Kafka's quota keys, named once; a value to set is
positive (and whole for the byte rates). A failed check is the entry's INVALID_REQUEST with the
message of `QuotaEntityError`; the other entries of the request are unaffected.

`QuotaFilter` is DescribeClientQuotas' filter: each component names an entity type and matches an
exact name (match type 0), the default entity (1) or any name of that type, the default included
(2); an entity matches when every component matches one of its parts and, with ``strict``, it has
no part the components do not mention. No components and not strict matches every entity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .entities import DEFAULT, ENTITY_TYPES, QuotaEntity, QuotaEntityError, validate_quota

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


@dataclass(frozen=True)
class Alteration:
    entity: QuotaEntity
    set_values: Mapping[str, float]
    remove: tuple[str, ...]


def parse_alteration(entity_parts: Iterable[tuple[str, str | None]],
                     ops: Iterable[tuple[str, float, bool]]) -> Alteration:
    """One AlterClientQuotas entry: entity (type, name-or-None) pairs and (key, value, remove) ops."""
    entity = QuotaEntity.from_parts(entity_parts)
    set_values: dict[str, float] = {}
    remove: list[str] = []
    for key, value, is_removal in ops:
        if key in set_values or key in remove:
            raise QuotaEntityError(f"quota key {key!r} is given more than once")
        if is_removal:
            validate_quota(key, 1.0)  # the key must be known; the value of a removal is ignored
            remove.append(key)
        else:
            validate_quota(key, value)
            set_values[key] = value
    return Alteration(entity, set_values, tuple(remove))


@dataclass(frozen=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


@dataclass(frozen=True)
class QuotaFilter:
    components: tuple[FilterComponent, ...]
    strict: bool

    @classmethod
    def parse(cls, components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
        """A filter from (entity_type, match_type, match) triples; QuotaEntityError when Kafka would refuse it."""
        parsed: list[FilterComponent] = []
        for entity_type, match_type, match in components:
            if entity_type not in ENTITY_TYPES:
                raise QuotaEntityError(f"unsupported quota entity type {entity_type!r}; Floe knows "
                                       f"{', '.join(ENTITY_TYPES)}")
            if any(c.entity_type == entity_type for c in parsed):
                raise QuotaEntityError(f"duplicate filter component for entity type {entity_type!r}")
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise QuotaEntityError(f"unknown match type {match_type}")
            if match_type == MATCH_EXACT and match is None:
                raise QuotaEntityError(f"an exact match of {entity_type!r} needs a name")
            parsed.append(FilterComponent(entity_type, match_type, match))
        return cls(tuple(parsed), strict)

    def matches(self, entity: QuotaEntity) -> bool:
        named = dict(entity.parts())
        for component in self.components:
            if component.entity_type not in named:
                return False
            name = named[component.entity_type]
            if component.match_type == MATCH_EXACT and name != component.match:
                return False
            if component.match_type == MATCH_DEFAULT and name is not None:
                return False
        if self.strict:
            return set(named) == {c.entity_type for c in self.components}
        return True


def describe(by_entity: Mapping[QuotaEntity, Mapping[str, float]],
             quota_filter: QuotaFilter) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The stored entities ``quota_filter`` matches, with their quotas, in a stable order."""
    found = [(entity, dict(values)) for entity, values in by_entity.items()
             if values and quota_filter.matches(entity)]
    return sorted(found, key=lambda pair: _order(pair[0]))


def _order(entity: QuotaEntity) -> tuple:
    def text(name: object) -> tuple[int, str]:
        if name is None:
            return (0, "")
        return (1, "") if name is DEFAULT else (2, str(name))

    return (text(entity.user), text(entity.client_id))
