"""SASL/OAUTHBEARER with AWS IAM identities: the token is a presigned ``sts:GetCallerIdentity`` request.

The scheme of aws-iam-authenticator and Vault's AWS method. A client signs (SigV4, query string,
``X-Amz-Expires`` 900 s, no network call) the request ``GET https://<sts endpoint>/?Action=
GetCallerIdentity&Version=2011-06-15`` with one extra signed header, ``x-floe-audience: <cluster's
audience>``, and sends as its OAUTHBEARER token::

    floe-iam-v1.<base64url, unpadded, of {"url": <presigned URL>, "audience": <audience>}>

The broker (`IamTokenVerifier`) checks, before any network call: the audience is its own; the URL's
scheme and host are exactly its configured STS endpoint (the request goes to that endpoint, never to
a host a client chose); the query holds GetCallerIdentity and SigV4 query parameters and nothing
else; ``x-floe-audience`` is among the signed headers; ``X-Amz-Date`` is at most ``max_age_s`` old
(and at most 5 minutes ahead) and within its ``X-Amz-Expires``, which may not exceed 15 minutes
(or ``max_age_s`` if larger). Then it sends the request,
with ``x-floe-audience`` set to its own audience, to its STS endpoint: STS checks the signature over
the query and that header, so a token signed for another audience, altered, or expired fails there,
and answers with the caller's ARN. An assumed-role session ARN
(``arn:aws:sts::ACCT:assumed-role/ROLE/SESSION``) becomes its role's ARN
(``arn:aws:iam::ACCT:role/ROLE``; the role's path is not in a session ARN, so ACLs name roles without
their path); other ARNs are kept as they are; the principal is ``User:<arn>``.

Client side: `iam_token`, and ready-made providers `iam_oauth_cb` (confluent-kafka's ``oauth_cb``)
and `IamTokenProvider` (kafka-python's and aiokafka's ``sasl_oauth_token_provider``).

The verifier keeps no state per token and may be shared by every connection of a broker; its STS
call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import hmac
import importlib
import json
import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit
from xml.etree import ElementTree

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest

from .errors import AuthenticationError

log = logging.getLogger(__name__)

AUDIENCE_HEADER = "x-floe-audience"
TOKEN_PREFIX = "floe-iam-v1."
DEFAULT_MAX_AGE_S = 900
MAX_TOKEN_CHARS = 8192  # a presigned URL with a session token is about 2 KiB
FUTURE_SKEW_S = 300
STS_TIMEOUT_S = 5.0
MAX_STS_RESPONSE_BYTES = 64 * 1024
_STS_VERSION = "2011-06-15"
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_REQUIRED = ("Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
             "X-Amz-SignedHeaders", "X-Amz-Signature")
_ALLOWED = frozenset(_REQUIRED) | {"X-Amz-Security-Token"}
_ASSUMED_ROLE = re.compile(r"arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+\Z")
_ARN = re.compile(r"arn:aws[a-z-]*:(iam|sts)::\d{12}:\S+\Z")
# RFC 7628 client initial response; Kafka's clients send "auth=Bearer <token>" and optional extensions.
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +(?P<token>[-_.a-zA-Z0-9]+)\Z")

_REFUSED = "IAM token refused"


def sts_endpoint_for(region: str) -> str:
    return f"https://sts.{region}.amazonaws.com"


def parse_oauthbearer(message: bytes) -> str:
    """The bearer token of an RFC 7628 client message (``n,,\\x01auth=Bearer <token>\\x01\\x01``)."""
    try:
        text = bytes(message).decode("ascii")
    except (UnicodeDecodeError, TypeError, ValueError):
        raise AuthenticationError("malformed OAUTHBEARER message") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01") or not re.fullmatch(r"n,(a=[^,\x01]*)?,", header):
        raise AuthenticationError("malformed OAUTHBEARER message")
    pairs = rest[:-2].split("\x01")
    auth = None
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z]+", key):
            raise AuthenticationError("malformed OAUTHBEARER message")
        if key == "auth":
            if auth is not None:
                raise AuthenticationError("malformed OAUTHBEARER message")
            auth = value
    match = _BEARER.match(auth or "")
    if match is None:
        raise AuthenticationError("OAUTHBEARER message has no bearer token")
    return match["token"]


def principal_arn(arn: str) -> str:
    """The ARN a principal names: an assumed-role session's role, else the caller's ARN as it is."""
    match = _ASSUMED_ROLE.match(arn)
    if match:
        return f"arn:{match['partition']}:iam::{match['account']}:role/{match['role']}"
    if not _ARN.match(arn):
        raise AuthenticationError(_REFUSED)
    return arn


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """STS answers GetCallerIdentity itself; a redirect would send the token somewhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class IamTokenVerifier:
    """Verifies IAM OAUTHBEARER tokens for one audience against one STS endpoint (see the module doc)."""

    def __init__(self, audience: str, sts_endpoint_url: str | None, region: str, max_age_s: int = DEFAULT_MAX_AGE_S,
                 *, clock: Callable[[], float] = time.time, timeout_s: float = STS_TIMEOUT_S) -> None:
        if not audience:
            raise ValueError("an IAM token audience is required (floe.sasl.oauthbearer.iam.audience)")
        endpoint = urlsplit(sts_endpoint_url or sts_endpoint_for(region))
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc or endpoint.path not in ("", "/") \
                or endpoint.query or endpoint.fragment:
            raise ValueError(f"the STS endpoint must be scheme://host[:port], got {sts_endpoint_url!r}")
        self.audience = audience
        self._scheme = endpoint.scheme
        self._netloc = endpoint.netloc.lower()
        self._max_age_s = max_age_s
        self._clock = clock
        self._timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirects)

    @property
    def endpoint_url(self) -> str:
        return f"{self._scheme}://{self._netloc}"

    async def authenticate(self, message: bytes) -> str:
        """The principal of an OAUTHBEARER client message carrying an IAM token (`parse_oauthbearer`
        then `verify`): what a SASL connection calls with the client's SaslAuthenticate bytes."""
        return await self.verify(parse_oauthbearer(message))

    async def verify(self, token: str) -> str:
        """The principal (``User:<arn>``) of a valid token; AuthenticationError for any other."""
        return (await self.verify_until(token))[0]

    async def verify_until(self, token: str) -> tuple[str, float]:
        """The principal of a valid token and when the token stops being valid here (seconds since the
        epoch: its signing time plus the shorter of its X-Amz-Expires and the broker's maximum age), which
        bounds the session it opens (KIP-368); AuthenticationError for any other token."""
        query, expires_at = self._checked(token)
        arn = await asyncio.to_thread(self._caller_arn, query)
        return f"User:{principal_arn(arn)}", expires_at

    def checked_query(self, token: str) -> str:
        """The presigned query string of ``token``, after every check that needs no network call."""
        return self._checked(token)[0]

    def _checked(self, token: str) -> tuple[str, float]:
        url, audience = _decode_token(token)
        if not hmac.compare_digest(audience.encode("utf-8"), self.audience.encode("utf-8")):
            raise AuthenticationError("IAM token is for another audience")
        parts = urlsplit(url)
        if parts.scheme != self._scheme or parts.netloc.lower() != self._netloc or parts.path not in ("", "/") \
                or parts.fragment:
            raise AuthenticationError("IAM token names another STS endpoint")
        params = _query_params(parts.query)
        if params["Action"] != "GetCallerIdentity" or params["Version"] != _STS_VERSION \
                or params["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
            raise AuthenticationError(_REFUSED)
        if AUDIENCE_HEADER not in params["X-Amz-SignedHeaders"].split(";"):
            raise AuthenticationError("IAM token does not sign its audience")
        scope = params["X-Amz-Credential"].split("/")
        if len(scope) != 5 or scope[3] != "sts" or scope[4] != "aws4_request":
            raise AuthenticationError(_REFUSED)
        expires_at = self._check_age(params["X-Amz-Date"], params["X-Amz-Expires"])
        return parts.query, expires_at

    def _check_age(self, amz_date: str, expires_text: str) -> float:
        try:
            signed_at = datetime.datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=datetime.UTC).timestamp()
            expires = int(expires_text)
        except ValueError:
            raise AuthenticationError(_REFUSED) from None
        now = self._clock()
        if not 0 < expires <= max(self._max_age_s, DEFAULT_MAX_AGE_S):
            raise AuthenticationError(_REFUSED)
        if signed_at > now + FUTURE_SKEW_S:
            raise AuthenticationError("IAM token is signed in the future")
        if now - signed_at > min(self._max_age_s, expires):
            raise AuthenticationError("IAM token has expired")
        return signed_at + min(self._max_age_s, expires)

    def _caller_arn(self, query: str) -> str:
        request = urllib.request.Request(f"{self.endpoint_url}/?{query}", headers={AUDIENCE_HEADER: self.audience})
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                body = response.read(MAX_STS_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as err:
            # STS refused the signature, the audience or the expiry: the client's doing.
            raise AuthenticationError(_REFUSED) from err
        except (OSError, ValueError) as err:
            log.warning("IAM token could not be verified, STS at %s unreachable: %s", self.endpoint_url, err)
            raise AuthenticationError("IAM token could not be verified") from err
        if len(body) > MAX_STS_RESPONSE_BYTES:
            raise AuthenticationError("IAM token could not be verified")
        return _arn_of(body)


def iam_verifier_from_settings(setting: Callable[[str], str], region: str) -> IamTokenVerifier:
    """The verifier a broker's floe.sasl.oauthbearer.iam.* settings describe (``setting(name)`` is the
    broker's value of a setting); ValueError when no audience is set."""
    endpoint = setting("floe.sasl.oauthbearer.iam.sts.endpoint") or None
    max_age_ms = int(setting("floe.sasl.oauthbearer.iam.token.max.age.ms"))
    return IamTokenVerifier(setting("floe.sasl.oauthbearer.iam.audience"), endpoint, region, max(1, max_age_ms // 1000))


def _decode_token(token: str) -> tuple[str, str]:
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.startswith(TOKEN_PREFIX):
        raise AuthenticationError("not a Floe IAM token")
    encoded = token[len(TOKEN_PREFIX):]
    try:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", encoded):
            raise ValueError("not base64url")
        document = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise AuthenticationError("malformed IAM token") from None
    if not isinstance(document, dict) or set(document) != {"url", "audience"} \
            or not all(isinstance(value, str) for value in document.values()):
        raise AuthenticationError("malformed IAM token")
    return document["url"], document["audience"]


def _query_params(query: str) -> Mapping[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise AuthenticationError(_REFUSED) from None
    params = dict(pairs)
    if len(params) != len(pairs) or not set(_REQUIRED) <= set(params) <= _ALLOWED:
        raise AuthenticationError(_REFUSED)
    return params


def _arn_of(body: bytes) -> str:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise AuthenticationError("IAM token could not be verified") from None
    for element in root.iter():
        if element.tag == "Arn" or element.tag.endswith("}Arn"):
            return (element.text or "").strip()
    raise AuthenticationError("IAM token could not be verified")


# client side ------------------------------------------------------------------------------------


def iam_token(audience: str, region: str, sts_endpoint_url: str | None = None, session: Any = None) -> tuple[str, float]:
    """A token for ``audience`` signed with ``session``'s credentials (a boto3 or botocore session;
    default: boto3's credential chain), and when it expires (seconds since the epoch)."""
    if session is None:
        import boto3

        session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise AuthenticationError("no AWS credentials to sign an IAM token with")
    endpoint = (sts_endpoint_url or sts_endpoint_for(region)).rstrip("/")
    request = AWSRequest(method="GET", url=f"{endpoint}/?Action=GetCallerIdentity&Version={_STS_VERSION}",
                         headers={AUDIENCE_HEADER: audience})
    signed_at = time.time()
    SigV4QueryAuth(credentials.get_frozen_credentials(), "sts", region, expires=DEFAULT_MAX_AGE_S).add_auth(request)
    document = json.dumps({"url": request.url, "audience": audience}, separators=(",", ":")).encode()
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(document).decode("ascii").rstrip("=")
    return token, signed_at + DEFAULT_MAX_AGE_S


def parse_oauth_config(text: str) -> dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.config``: space-separated key=value pairs."""
    found = {}
    for pair in text.split():
        key, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"sasl.oauthbearer.config: {pair!r} is not key=value")
        found[key] = value
    if "audience" not in found or "region" not in found:
        raise ValueError("sasl.oauthbearer.config needs audience=... and region=... (sts_endpoint=... optional)")
    return found


def iam_oauth_cb(oauth_config: str) -> tuple[str, float]:
    """confluent-kafka's ``oauth_cb``: set ``"sasl.oauthbearer.config": "audience=A region=R
    [sts_endpoint=URL]"`` and ``"oauth_cb": iam_oauth_cb``; credentials come from boto3's chain."""
    config = parse_oauth_config(oauth_config)
    return iam_token(config["audience"], config["region"], config.get("sts_endpoint"))


class _AwaitableToken(str):
    """A token that is also awaitable: kafka-python calls ``token()``, aiokafka awaits it."""

    def __await__(self) -> Any:
        return self._value().__await__()

    async def _value(self) -> str:
        return str(self)


# Where each client library keeps the token provider class it checks for with isinstance.
_PROVIDER_CLASSES = (("kafka.net.sasl.oauth", "AbstractTokenProvider"),  # kafka-python 3
                     ("kafka.sasl.oauth", "AbstractTokenProvider"),  # kafka-python 2.1, 2.2
                     ("kafka.oauth.abstract", "AbstractTokenProvider"),  # kafka-python 2.0
                     ("aiokafka.abc", "AbstractTokenProvider"))


def _provider_bases() -> tuple[type, ...]:
    """The token provider base classes of the client libraries installed (none needs to be)."""
    bases: list[type] = []
    for module_name, class_name in _PROVIDER_CLASSES:
        try:
            base = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if base not in bases and not (module_name.startswith("kafka.") and any(
                b.__module__.startswith("kafka.") for b in bases)):
            bases.append(base)
    return tuple(bases) or (object,)


class _IamTokenProviderMethods:
    """``sasl_oauth_token_provider`` for kafka-python and aiokafka: a token reused for 5 minutes, then
    signed anew (signing is local; the broker accepts a token for 15 minutes)."""

    REUSE_S = 300.0

    def __init__(self, audience: str, region: str, sts_endpoint_url: str | None = None, session: Any = None) -> None:
        self._audience = audience
        self._region = region
        self._sts_endpoint_url = sts_endpoint_url
        self._session = session
        self._token: str | None = None
        self._signed_at = 0.0

    def token(self) -> _AwaitableToken:
        now = time.monotonic()
        if self._token is None or now - self._signed_at > self.REUSE_S:
            self._token, _ = iam_token(self._audience, self._region, self._sts_endpoint_url, self._session)
            self._signed_at = now
        return _AwaitableToken(self._token)

    def extensions(self) -> dict[str, str]:
        return {}


def _token_provider_class() -> type:
    """`IamTokenProvider`, built on first use: its bases are the client libraries' provider classes,
    and importing kafka-python and aiokafka costs about half a second of CPU that a process which never
    uses the provider (a broker, a Spark job's Python workers) should not pay when it imports this module."""
    return type("IamTokenProvider", (_IamTokenProviderMethods, *_provider_bases()),
                {"__module__": __name__, "__qualname__": "IamTokenProvider",
                 "__doc__": _IamTokenProviderMethods.__doc__})


def __getattr__(name: str) -> Any:
    if name == "IamTokenProvider":
        provider = globals()["IamTokenProvider"] = _token_provider_class()
        return provider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
