"""Client security properties files (Kafka's --command-config format) and what they become."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.client import ClientSecurity, ClientSecurityError
from broker_core.client.security import parse_properties, properties_text, read_properties


def test_a_properties_file_is_read_as_kafkas_clis_read_it(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# a comment\n! another\n\nsecurity.protocol = SASL_SSL\nsasl.mechanism: SCRAM-SHA-512\n"
                    "sasl.username=alice\nsasl.password=p=ss:word\n  ssl.ca.location=/etc/ca.pem  \n")
    properties = read_properties(path)
    assert properties == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                          "sasl.username": "alice", "sasl.password": "p=ss:word", "ssl.ca.location": "/etc/ca.pem"}


def test_properties_text_reads_back_and_builds_the_same_security(tmp_path: Path) -> None:
    config = {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "x=y"}
    path = tmp_path / "p.properties"
    path.write_text(properties_text(config))
    assert read_properties(path) == config
    security = ClientSecurity.from_properties(read_properties(path))
    assert (security.protocol, security.sasl_mechanism, security.username, security.password) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "x=y")


def test_a_line_without_a_value_and_a_missing_file_are_named(tmp_path: Path) -> None:
    with pytest.raises(ClientSecurityError, match="line 2"):
        parse_properties(["a=b", "just-a-word"])
    with pytest.raises(ClientSecurityError, match="missing.properties"):
        read_properties(tmp_path / "missing.properties")


def test_oauthbearer_needs_an_audience_and_a_region_but_no_user_name() -> None:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.config": "audience=floe-prod region=eu-west-1 sts_endpoint=https://sts.eu-west-1.amazonaws.com"})
    assert (security.sasl_mechanism, security.username) == ("OAUTHBEARER", "")
    with pytest.raises(ClientSecurityError, match="audience=... and region="):
        ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"})
