"""Errors of authentication, shared by every SASL mechanism and by the connection that runs them.

``AuthenticationError``'s message goes to the client as it is (SaslAuthenticate's ``error_message``
with SASL_AUTHENTICATION_FAILED), so it is short and never says more than the client already knows:
an unknown user and a wrong password read the same, and no table name, stack trace or peer detail
appears in it. What the broker wants to log beyond that it logs itself, with the peer address.
"""

from __future__ import annotations


class AuthenticationError(Exception):
    """A client failed to authenticate; ``str(error)`` is safe to send back to that client."""
