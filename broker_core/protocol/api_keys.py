"""Kafka API keys, one table for the whole code base: built from kio's generated schema index.

``ApiKey.PRODUCE == 0``, ``ApiKey.FIND_COORDINATOR == 10`` and so on, one member per API that kio
generates (its names upper-cased), so no module spells an API key as a bare number.
"""

from __future__ import annotations

import enum

from kio.schema.index import api_key_map

ApiKey = enum.IntEnum("ApiKey", {name.upper(): key for key, name in api_key_map.items()})
ApiKey.__doc__ = "A Kafka API key, named as Kafka's protocol schema names the API."
