"""Producer ids bound to principals: each principal owns the ids handed to it, and no other."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.security.producer_ids import MAX_SERIAL, owns_producer_id, principal_producer_id

PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:ANONYMOUS", "User:arn:aws:iam::1:role/x",
                              "User:CN=broker-1,O=Floe"])


@given(st.integers(0, MAX_SERIAL), PRINCIPALS)
def test_the_principal_an_id_was_handed_to_owns_it(serial: int, principal: str) -> None:
    producer_id = principal_producer_id(serial, principal)
    assert 0 <= producer_id < 2**63
    assert owns_producer_id(principal, producer_id)


def test_other_principals_do_not_own_an_id() -> None:
    ids = [principal_producer_id(serial, "User:alice") for serial in range(2000)]
    assert len(set(ids)) == len(ids)
    assert sum(owns_producer_id("User:bob", pid) for pid in ids) <= 1  # a 24-bit tag: ~1 in 16.7 million
    assert not owns_producer_id("User:alice", -1)


def test_untagged_ids_of_an_allocator_without_an_authorizer_are_nobodys() -> None:
    assert sum(owns_producer_id("User:ANONYMOUS", serial) for serial in range(2000)) <= 1


def test_serials_outside_the_int64_range_are_refused() -> None:
    with pytest.raises(ValueError):
        principal_producer_id(MAX_SERIAL + 1, "User:alice")
