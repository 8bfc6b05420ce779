"""Floe's Kafka client: the one way the code base speaks the Kafka protocol to a broker.

`connection` holds `BrokerConnection`, one pipelined asyncio connection (secured as `security`'s
`ClientSecurity` says), and `blocking` its
blocking facade `BlockingConnection`; `floe_client` holds `FloeClient`, which routes requests to
partition leaders over such connections; `results` the dataclasses it returns, `errors` what it
raises and `backoff` the pause between its retries. Callers import from here.
"""

from .backoff import RETRY_BACKOFF_S, backoff_s
from .blocking import BlockingConnection
from .connection import CLIENT_MAX_VERSIONS, BrokerConnection
from .errors import (
    AuthenticationFailedError,
    BrokerConnectionError,
    ClientError,
    KafkaError,
    NoBrokersError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from .floe_client import EARLIEST, LATEST, FloeClient, parse_bootstrap_servers
from .results import BrokerInfo, FetchResult, PartitionInfo, ProduceResult, RawFetchResult, TopicInfo
from .security import PLAINTEXT, ClientSecurity, ClientSecurityError

__all__ = [
    "CLIENT_MAX_VERSIONS",
    "EARLIEST",
    "LATEST",
    "PLAINTEXT",
    "RETRY_BACKOFF_S",
    "AuthenticationFailedError",
    "BlockingConnection",
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerInfo",
    "ClientError",
    "ClientSecurity",
    "ClientSecurityError",
    "FetchResult",
    "FloeClient",
    "KafkaError",
    "NoBrokersError",
    "PartitionInfo",
    "ProduceResult",
    "RawFetchResult",
    "RequestTimeoutError",
    "TopicInfo",
    "UnsupportedVersionError",
    "backoff_s",
    "parse_bootstrap_servers",
]
