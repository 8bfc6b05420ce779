"""Kafka principals: ``Type:name`` strings such as ``User:alice`` or ``User:CN=broker-1,O=Floe``.

A request carries its principal as that string (``protocol.framing.Request.principal``); this module
parses and builds them. ``User:ANONYMOUS`` is a connection that has not authenticated (or a
PLAINTEXT listener, where nobody does), as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

USER = "User"
ANONYMOUS = "User:ANONYMOUS"


class PrincipalError(ValueError):
    """A principal string that is not ``Type:name``."""


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may itself hold colons (ARNs)."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise PrincipalError(f"a principal is Type:name, got {text!r}")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER, name)
