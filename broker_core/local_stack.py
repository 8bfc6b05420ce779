"""The embedded local stack behind `floe local up`: moto in server mode plus N broker processes.

Everything is a real process reached over loopback: moto serves S3 and DynamoDB over HTTP through
the same `endpoint_url` setting production uses, and each broker is `python -m broker_core.server`.
Once every broker answers, `stack.json` in the stack directory tells clients where things are.
With ``http=True`` the stack also runs the front ends' local HTTP adapter (`functions.local_adapter`)
and stack.json gains ``"http": {"url", "token"}``: the token is a fresh random bearer token.

With ``security="ssl"`` or ``"sasl_ssl"`` (`floe local up --security`) the brokers listen on one SSL or
SASL_SSL listener, which is also their inter-broker listener. The stack makes a CA and a certificate per
broker under `<dir>/tls/` (`ca.pem`, `broker-<id>.pem`; keys mode 0600) and, in sasl_ssl, SCRAM-SHA-512
credentials in the `scram_credentials` table for a super user (`admin`) and for each broker (`broker-<id>`),
which brokers authenticate to each other with; `super.users` names them all. Its SASL_SSL listener
also takes OAUTHBEARER with IAM tokens checked against a moto STS server of its own (audience
`iam_audience`, endpoint `sts_endpoint` in stack.json). Passwords are made once and kept
in `<dir>/tls/secrets.json` (mode 0600), so a restarted stack keeps its CA, certificates and users.
stack.json then holds ``"security"`` and ``"client_config"``: the librdkafka properties of the super user
(`bootstrap.servers`, `security.protocol`, `ssl.ca.location`, `sasl.mechanisms`, `sasl.username`,
`sasl.password`), which confluent-kafka and `kcat -X` take as they are, and which the `floe` commands read.

moto keeps its state in memory, so the stack saves the DynamoDB tables under its prefix and the
bucket's objects into `<dir>/aws-state/` when it stops (and every `snapshot_interval_s` while it
runs) and loads them back when it starts again on the same directory; the brokers' logs live in
`<dir>/broker-<id>/`. Restarting with the same directory therefore keeps topics and data.

Every broker serves Prometheus metrics (`metrics.port`): the stack lets each pick a free port on
its first start (a restarted broker keeps it) and lists it in stack.json as ``brokers[i].metrics_url``;
consumer lag is sampled every second (``floe.consumer.lag.sample.ms=1000``). ``--set`` overrides win.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from broker_core.aws import AwsSettings
from broker_core.client.security import (
    PLAINTEXT,
    ClientSecurity,
    ClientSecurityError,
    properties_text,
    read_properties,
)
from broker_core.local_moto import MotoServer, start_moto_server
from broker_core.metadata.store import MetadataStore
from broker_core.security.certificates import (
    CertificateAuthority,
    create_ca,
    issue,
    keystore_pem,
    write_private,
)
from broker_core.security.credentials import ScramCredentialStore, UserChange
from broker_core.security.scram import make_credential

log = logging.getLogger(__name__)

DEFAULT_DIR = Path(".floe/local")
STACK_FILE = "stack.json"
_BROKER_READY_TIMEOUT_S = 60.0
_BROKER_STOP_TIMEOUT_S = 20.0
_HTTP_READY_TIMEOUT_S = 60.0
SECURITY_MODES = ("plaintext", "ssl", "sasl_ssl")
SUPER_USER = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"


class StackError(RuntimeError):
    """The local stack could not start; the message says which part and where its log is."""


@dataclass
class BrokerProcess:
    broker_id: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    port: int = 0
    listeners: dict[str, int] = field(default_factory=dict)  # listener name -> port, from its ready file
    metrics_port: int | None = None  # from its ready file; None when metrics are off

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else -1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalStack:
    directory: Path = DEFAULT_DIR
    brokers: int = 1
    overrides: dict[str, str] = field(default_factory=dict)
    # Settings of one broker only, over ``overrides`` (broker.rack for a rack-aware stack).
    broker_overrides: dict[int, dict[str, str]] = field(default_factory=dict)
    host: str = "127.0.0.1"
    region: str = "us-east-1"
    bucket: str = "floe-local"
    table_prefix: str = "floe-"
    moto: MotoServer | None = None
    processes: dict[int, BrokerProcess] = field(default_factory=dict)
    http: bool = False
    http_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    http_process: subprocess.Popen | None = None
    http_url: str | None = None
    security: str = "plaintext"
    secrets: dict[str, str] = field(default_factory=dict)  # user -> password (sasl_ssl)
    sts: MotoServer | None = None  # moto's STS alone, which verifies IAM tokens (sasl_ssl)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        if self.security not in SECURITY_MODES:
            raise StackError(f"security must be one of {', '.join(SECURITY_MODES)}, got {self.security!r}")

    # security ----------------------------------------------------------------------------------

    @property
    def tls_dir(self) -> Path:
        return self.directory / "tls"

    def _prepare_security(self) -> None:
        """CA, broker certificates and (sasl_ssl) passwords, made once per stack directory."""
        if self.security == "plaintext":
            return
        ca_path = self.tls_dir / "ca.pem"
        if not ca_path.exists():
            ca = create_ca()
            for broker_id in range(1, self.brokers + 1):
                certificate, key = issue(ca, f"broker-{broker_id}", (self.host, "localhost"))
                write_private(self.tls_dir / f"broker-{broker_id}.pem", keystore_pem(ca, certificate, key))
            write_private(self.tls_dir / "ca.pem", ca.pem)
            # Kept so that a broker started later (start_broker past `brokers`) gets a certificate too.
            write_private(self.tls_dir / "ca-key.pem",
                          ca.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
        if self.security == "sasl_ssl":
            secrets_path = self.tls_dir / "secrets.json"
            known = json.loads(secrets_path.read_text()) if secrets_path.exists() else {}
            users = [SUPER_USER, *(f"broker-{b}" for b in range(1, self.brokers + 1))]
            self.secrets = {user: known.get(user) or secrets.token_urlsafe(24) for user in users}
            write_private(secrets_path, json.dumps(self.secrets).encode())

    def _provision_broker(self, broker_id: int) -> None:
        """The certificate and (sasl_ssl) SCRAM user of a broker the stack did not start with."""
        if self.security == "plaintext":
            return
        keystore = self.tls_dir / f"broker-{broker_id}.pem"
        if not keystore.exists():
            try:
                ca = CertificateAuthority(x509.load_pem_x509_certificate((self.tls_dir / "ca.pem").read_bytes()),
                                          load_pem_private_key((self.tls_dir / "ca-key.pem").read_bytes(), None))
            except OSError as exc:
                raise StackError(f"no certificate for broker {broker_id} and no CA key to issue one: {exc}") from None
            certificate, key = issue(ca, f"broker-{broker_id}", (self.host, "localhost"))
            write_private(keystore, keystore_pem(ca, certificate, key))
        user = f"broker-{broker_id}"
        if self.security == "sasl_ssl" and user not in self.secrets:
            self.secrets[user] = secrets.token_urlsafe(24)
            write_private(self.tls_dir / "secrets.json", json.dumps(self.secrets).encode())
            ScramCredentialStore(self.aws).alter(
                UserChange(user, (make_credential(SCRAM_MECHANISM, self.secrets[user]),), ()))

    def _create_users(self) -> None:
        """The super user's and the brokers' SCRAM credentials, before any broker starts."""
        store = ScramCredentialStore(self.aws)
        store.ensure_table()
        for user, password in self.secrets.items():
            store.alter(UserChange(user, (make_credential(SCRAM_MECHANISM, password),), ()))

    def _security_overrides(self, broker_id: int, port: int) -> dict[str, str]:
        if self.security == "plaintext":
            return {}
        listener = "SSL" if self.security == "ssl" else "SASL_SSL"
        overrides = {
            "listeners": f"{listener}://{self.host}:{port}",
            "inter.broker.listener.name": listener,
            "ssl.keystore.location": str(self.tls_dir / f"broker-{broker_id}.pem"),
            "ssl.truststore.location": str(self.tls_dir / "ca.pem"),
        }
        if self.security == "sasl_ssl":
            overrides |= {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER",
                "floe.sasl.oauthbearer.iam.audience": self.iam_audience,
                "floe.sasl.oauthbearer.iam.sts.endpoint": self.sts.endpoint_url if self.sts else "",
                "floe.inter.broker.sasl.mechanism": SCRAM_MECHANISM,
                "floe.inter.broker.sasl.username": f"broker-{broker_id}",
                "floe.inter.broker.sasl.password": self.secrets[f"broker-{broker_id}"],
                "super.users": ";".join(f"User:{user}" for user in self.secrets),
                # A broker added later (start_broker past `brokers`) is named by no running broker's
                # super.users: they trust it from its registration on, without restarting.
                "floe.super.users.include.brokers": "true",
            }
        return overrides

    @property
    def iam_audience(self) -> str:
        """The audience IAM OAUTHBEARER tokens for this stack are signed for (sasl_ssl)."""
        return f"floe-local-{self.table_prefix.strip('-') or 'floe'}"

    @property
    def client_config(self) -> dict[str, str]:
        """librdkafka properties for the super user: what confluent-kafka and `kcat -X` take."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.security == "ssl":
            config |= {"security.protocol": "SSL", "ssl.ca.location": str(self.tls_dir / "ca.pem")}
        elif self.security == "sasl_ssl":
            config |= {"security.protocol": "SASL_SSL", "ssl.ca.location": str(self.tls_dir / "ca.pem"),
                       "sasl.mechanisms": SCRAM_MECHANISM, "sasl.username": SUPER_USER,
                       "sasl.password": self.secrets[SUPER_USER]}
        return config

    # lifecycle ---------------------------------------------------------------------------------

    @property
    def aws(self) -> AwsSettings:
        assert self.moto is not None, "stack not started"
        return AwsSettings(endpoint_url=self.moto.endpoint_url, region=self.region, bucket=self.bucket,
                           table_prefix=self.table_prefix)

    def start(self) -> dict[str, Any]:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "logs").mkdir(exist_ok=True)
        for name, value in (("AWS_ACCESS_KEY_ID", "floe-local"), ("AWS_SECRET_ACCESS_KEY", "floe-local")):
            os.environ.setdefault(name, value)
        if self.moto is None:  # one handed in (a moto server, or a proxy in front of one) is used as it is
            self.moto = start_moto_server(self.host, 0, log_path=self.directory / "logs" / "moto.log")
        try:
            MetadataStore(self.aws).ensure_tables()
            s3 = self._s3()
            s3.create_bucket(Bucket=self.bucket)
            self._restore_state()
            self._prepare_security()
            if self.security == "sasl_ssl":
                self._create_users()
                self.sts = start_moto_server(self.host, 0, log_path=self.directory / "logs" / "sts.log", service="sts")
            for broker_id in range(1, self.brokers + 1):
                self.start_broker(broker_id)
            for broker_id in self.processes:
                self.wait_for_broker(broker_id)
            if self.http:
                self.start_http_adapter()
        except BaseException:
            self.stop(save_state=False)
            raise
        return self.write_stack_file()

    def stop(self, *, save_state: bool = True) -> None:
        self.stop_http_adapter()
        for broker in self.processes.values():
            if broker.alive():
                broker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _BROKER_STOP_TIMEOUT_S
        for broker in self.processes.values():
            if broker.process is None:
                continue
            try:
                broker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                broker.process.kill()
                broker.process.wait()
        try:
            if self.moto is not None and save_state:
                self.save_state()
        finally:  # a save that failed still stops moto, rather than leave it running without its stack
            if self.moto is not None:
                self.moto.stop()
                self.moto = None
            if self.sts is not None:
                self.sts.stop()
                self.sts = None

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # brokers -----------------------------------------------------------------------------------

    def start_broker(self, broker_id: int) -> BrokerProcess:
        data_dir = self.directory / f"broker-{broker_id}"
        data_dir.mkdir(parents=True, exist_ok=True)
        broker = self.processes.get(broker_id) or BrokerProcess(
            broker_id, data_dir, self.directory / "logs" / f"broker-{broker_id}.log")
        ready = data_dir / "ready.json"
        ready.unlink(missing_ok=True)
        self._provision_broker(broker_id)
        port = broker.port  # a restarted broker keeps its port so clients' bootstrap lists stay valid
        command = [
            sys.executable, "-m", "broker_core.server", "--broker-id", str(broker_id), "--host", self.host,
            "--port", str(port), "--data-dir", str(data_dir), "--endpoint-url", self.aws.endpoint_url,
            "--region", self.region, "--bucket", self.bucket, "--table-prefix", self.table_prefix,
            "--ready-file", str(ready),
        ]
        metrics = {"metrics.port": str(broker.metrics_port or 0), "floe.consumer.lag.sample.ms": "1000"}
        settings = {**metrics, **self._security_overrides(broker_id, port), **self.overrides,
                    **self.broker_overrides.get(broker_id, {})}
        for key, value in settings.items():
            command += ["--set", f"{key}={value}"]
        log_file = open(broker.log_path, "ab")
        broker.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        log_file.close()
        self.processes[broker_id] = broker
        return broker

    def wait_for_broker(self, broker_id: int, timeout_s: float = _BROKER_READY_TIMEOUT_S) -> BrokerProcess:
        broker = self.processes[broker_id]
        ready = broker.data_dir / "ready.json"
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            if not broker.alive():
                raise StackError(f"broker {broker_id} exited during start-up; see {broker.log_path}")
            if time.monotonic() > deadline:
                raise StackError(f"broker {broker_id} not ready after {timeout_s:.0f}s; see {broker.log_path}")
            time.sleep(0.05)
        answer = json.loads(ready.read_text())
        broker.port = answer["port"]
        broker.listeners = answer.get("listeners", {})
        broker.metrics_port = answer.get("metrics_port")
        return broker

    def kill_broker(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        broker = self.processes[broker_id]
        if broker.alive():
            broker.process.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                broker.process.wait(timeout=_BROKER_STOP_TIMEOUT_S)

    def restart_broker(self, broker_id: int) -> BrokerProcess:
        self.start_broker(broker_id)
        broker = self.wait_for_broker(broker_id)
        self.write_stack_file()
        return broker

    # the front ends' local HTTP adapter ------------------------------------------------------

    def start_http_adapter(self) -> str:
        """Start `functions.local_adapter` against this stack's brokers and AWS settings; its URL."""
        ready = self.directory / "http-ready.json"
        ready.unlink(missing_ok=True)
        log_path = self.directory / "logs" / "http.log"
        # The adapter's broker client authenticates as the stack's clients do (a file only we may read).
        client_properties = write_private(self.directory / "http-client.properties",
                                          properties_text(self.client_config).encode())
        environment = {
            **os.environ,
            "FLOE_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "FLOE_CLIENT_PROPERTIES_FILE": str(client_properties),
            "FLOE_AWS_ENDPOINT_URL": self.aws.endpoint_url or "",
            "AWS_REGION": self.region,
            "FLOE_BUCKET": self.bucket,
            "FLOE_TABLE_PREFIX": self.table_prefix,
            "FLOE_HTTP_TOKEN": self.http_token,
        }
        command = [sys.executable, "-m", "functions.local_adapter", "--host", self.host, "--port", "0",
                   "--ready-file", str(ready)]
        with open(log_path, "ab") as log_file:
            self.http_process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, env=environment, start_new_session=True)
        deadline = time.monotonic() + _HTTP_READY_TIMEOUT_S
        while not ready.exists():
            if self.http_process.poll() is not None:
                raise StackError(f"the HTTP adapter exited during start-up; see {log_path}")
            if time.monotonic() > deadline:
                raise StackError(f"the HTTP adapter not ready after {_HTTP_READY_TIMEOUT_S:.0f}s; see {log_path}")
            time.sleep(0.05)
        self.http_url = json.loads(ready.read_text())["url"]
        return self.http_url

    def stop_http_adapter(self) -> None:
        process, self.http_process = self.http_process, None
        self.http_url = None
        if process is None or process.poll() is not None:
            return
        # The adapter leads its own process group (its worker processes): signal the whole group.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=_BROKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # stack.json --------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{b.port}" for b in self.processes.values() if b.port)

    def describe(self) -> dict[str, Any]:
        info = {
            "bootstrap_servers": self.bootstrap_servers,
            "brokers": [
                {"id": b.broker_id, "host": self.host, "port": b.port, "pid": b.pid, "data_dir": str(b.data_dir),
                 **({"metrics_url": self.metrics_url(b)} if b.metrics_port is not None else {})}
                for b in self.processes.values()
            ],
            "aws": self.aws.to_dict(),
            "moto_pid": self.moto.pid if self.moto else -1,
            "security": self.security,
            "client_config": self.client_config,
        }
        if self.sts is not None:
            info["iam"] = {"audience": self.iam_audience, "region": self.region, "sts_endpoint": self.sts.endpoint_url}
        if self.http_url is not None:
            info["http"] = {"url": self.http_url, "token": self.http_token}
        return info

    def metrics_url(self, broker: BrokerProcess) -> str:
        return f"http://{self.host}:{broker.metrics_port}/metrics"

    def write_stack_file(self) -> dict[str, Any]:
        info = self.describe()
        path = self.directory / STACK_FILE
        tmp = path.with_suffix(".tmp")
        tmp.touch(mode=0o600)  # it may hold the HTTP adapter's bearer token and the super user's password
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        tmp.rename(path)
        return info

    # moto state --------------------------------------------------------------------------------

    def _s3(self) -> Any:
        return boto3.client("s3", **self.aws.boto3_kwargs())

    def _dynamodb(self) -> Any:
        return boto3.client("dynamodb", **self.aws.boto3_kwargs())

    def save_state(self) -> None:
        """Write every item of the prefixed tables and every object of the bucket under aws-state/."""
        state = self.directory / "aws-state"
        tables_dir, objects_dir = state / "tables.tmp", state / "objects"
        tables_dir.mkdir(parents=True, exist_ok=True)
        dynamodb = self._dynamodb()
        for table in _table_names(dynamodb):
            if not table.startswith(self.table_prefix):
                continue
            items = []
            for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
                items += page["Items"]
            # Items stay in DynamoDB's own attribute-value JSON (binary values base64, as on the wire),
            # so every type round-trips exactly. The key schema comes along: tables the brokers or the
            # HTTP adapter create only after the restore (manifest, groups, idempotency) must exist
            # before their items go back.
            described = dynamodb.describe_table(TableName=table)["Table"]
            (tables_dir / f"{table}.json").write_text(json.dumps({
                "key_schema": described["KeySchema"],
                "attribute_definitions": described["AttributeDefinitions"],
                "items": [{name: attribute_json(value) for name, value in item.items()} for item in items],
            }))
        s3 = self._s3()
        keys = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                keys.append(obj["Key"])
                target = objects_dir / obj["Key"]
                if not target.exists() or target.stat().st_size != obj["Size"]:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    s3.download_file(self.bucket, obj["Key"], str(target))
        (state / "objects.json").write_text(json.dumps(keys))
        final = state / "tables"
        if final.exists():
            for old in final.iterdir():
                old.unlink()
            final.rmdir()
        tables_dir.rename(final)

    def _restore_state(self) -> None:
        state = self.directory / "aws-state"
        tables_dir = state / "tables"
        if not tables_dir.exists():
            return
        dynamodb = self._dynamodb()
        existing = set(_table_names(dynamodb))
        for path in sorted(tables_dir.glob("*.json")):
            saved = json.loads(path.read_text())
            items = saved if isinstance(saved, list) else saved["items"]
            if path.stem not in existing and isinstance(saved, dict):
                dynamodb.create_table(TableName=path.stem, KeySchema=saved["key_schema"],
                                      AttributeDefinitions=saved["attribute_definitions"],
                                      BillingMode="PAY_PER_REQUEST")
                dynamodb.get_waiter("table_exists").wait(TableName=path.stem)
            for item in items:
                dynamodb.put_item(TableName=path.stem,
                                  Item={name: attribute_value(value) for name, value in item.items()})
        s3 = self._s3()
        for key in json.loads((state / "objects.json").read_text()) if (state / "objects.json").exists() else []:
            s3.upload_file(str(state / "objects" / key), self.bucket, key)


def attribute_json(value: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB attribute value as boto3's client gives it, in DynamoDB's JSON: binary (B, BS) as base64
    text, inside maps and lists too (group members' metadata and SCRAM salts are binary)."""
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(inner).decode("ascii")}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode("ascii") for b in inner]}
    if kind == "M":
        return {"M": {name: attribute_json(v) for name, v in inner.items()}}
    if kind == "L":
        return {"L": [attribute_json(v) for v in inner]}
    return value


def attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `attribute_json`: what boto3's client takes back."""
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64decode(inner)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b) for b in inner]}
    if kind == "M":
        return {"M": {name: attribute_value(v) for name, v in inner.items()}}
    if kind == "L":
        return {"L": [attribute_value(v) for v in inner]}
    return value


def _table_names(dynamodb: Any) -> list[str]:
    """Every table name: ListTables answers 100 at a time."""
    return [name for page in dynamodb.get_paginator("list_tables").paginate() for name in page["TableNames"]]


def cluster_settings(bootstrap_servers: str | None, directory: Path | str = DEFAULT_DIR, *,
                     command_config: Path | str | None = None,
                     properties: Sequence[str] = ()) -> tuple[str, ClientSecurity]:
    """Where a `floe` command finds the cluster and how it connects: ``bootstrap_servers`` as given
    (PLAINTEXT unless told otherwise), else the stack's stack.json, with its `client_config` (TLS and
    SASL in secured modes). Client properties (librdkafka's names) from ``command_config`` (a properties
    file, Kafka's `--command-config`), then each ``properties`` ``KEY=VALUE`` (`-X`, as kcat), are laid
    over that, later ones winning; StackError for a file or value that cannot be used."""
    if bootstrap_servers:
        servers, config = bootstrap_servers, {}
    else:
        info = load_stack(directory)
        servers, config = info["bootstrap_servers"], dict(info.get("client_config") or {})
    try:
        if command_config:
            config |= read_properties(command_config)
        for item in properties:
            key, equals, value = item.partition("=")
            if not equals or not key.strip():
                raise ClientSecurityError(f"-X {item!r} is not KEY=VALUE")
            config[key.strip()] = value.strip()
        return servers, ClientSecurity.from_properties(config) if config else PLAINTEXT
    except ClientSecurityError as exc:
        raise StackError(f"client properties: {exc}") from None


def cluster_settings_of(args: Any) -> tuple[str, ClientSecurity]:
    """`cluster_settings` from a `floe` command's parsed --bootstrap-servers/--stack, --command-config and -X."""
    return cluster_settings(args.bootstrap_servers, args.stack, command_config=getattr(args, "command_config", None),
                            properties=getattr(args, "client_property", None) or ())


def stack_metrics_urls(directory: Path | str = DEFAULT_DIR) -> list[str]:
    """The brokers' metrics URLs listed in the stack's stack.json (StackError without one)."""
    return [broker["metrics_url"] for broker in load_stack(directory)["brokers"] if broker.get("metrics_url")]


def load_stack(directory: Path | str = DEFAULT_DIR) -> dict[str, Any]:
    path = Path(directory) / STACK_FILE
    if not path.exists():
        raise StackError(f"no {STACK_FILE} in {directory}: start the stack with `floe local up` first")
    return json.loads(path.read_text())
