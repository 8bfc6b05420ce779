"""Producer ids bound to the principal they were handed to, so one principal cannot write (or fence) as
another's idempotent producer.

With an authorizer on, InitProducerId hands out ``serial << TAG_BITS | tag(serial, principal)``,
where the serial is the next id of the broker's DynamoDB-reserved block and the tag is 24 bits of
a BLAKE2b hash of the serial and the principal. A partition leader accepts a produced batch whose
producer id is set only when the id's tag matches the writing principal: any broker can check
that from the id alone, without state, after any failover. Taking over another principal's
producer id means finding a principal one controls whose tag collides with it (one chance in 2^24
per principal, and principals are identities a client cannot mint); the tag is not secret and
need not be, since the writer's principal is authenticated, not claimed.

A transactional producer's id belongs to its transactional id rather than to a principal (any
principal with WRITE on the id may take the producer over, as in Kafka): the transaction
coordinator tags it with `transactional_owner(transactional_id)`, and Produce checks a
transactional batch's producer id against the request's transactional id.

Producer ids handed out while no authorizer was configured carry no tag: after the authorizer is
turned on, their producers are refused until they ask for a new id. Pure functions; any thread.
"""

from __future__ import annotations

import hashlib

TAG_BITS = 24
MAX_SERIAL = (1 << (63 - TAG_BITS)) - 1  # producer ids are non-negative int64s
_TAG_MASK = (1 << TAG_BITS) - 1
_PERSON = b"floe-producer-id"


def _tag(serial: int, principal: str) -> int:
    digest = hashlib.blake2b(f"{serial}\x00{principal}".encode(), digest_size=TAG_BITS // 8, person=_PERSON).digest()
    return int.from_bytes(digest, "big")


def principal_producer_id(serial: int, principal: str) -> int:
    """The producer id for ``principal`` made from the allocator's ``serial`` (0 <= serial <= MAX_SERIAL)."""
    if not 0 <= serial <= MAX_SERIAL:
        raise ValueError(f"producer id serial {serial} is outside 0..{MAX_SERIAL}")
    return (serial << TAG_BITS) | _tag(serial, principal)


def owns_producer_id(principal: str, producer_id: int) -> bool:
    """Whether ``producer_id`` was handed to ``principal`` (see the module doc)."""
    return producer_id >= 0 and producer_id & _TAG_MASK == _tag(producer_id >> TAG_BITS, principal)


def transactional_owner(transactional_id: str) -> str:
    """What a transactional id's producer ids are tagged with: never a principal's string (which
    starts with its principal type, never with a NUL)."""
    return f"\x00TransactionalId\x00{transactional_id}"
