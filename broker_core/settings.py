"""Every setting Floe honours, declared once under Kafka's name: its type, default, check and doc.

A broker setting (`Scope.BROKER`) is read from the broker's Kafka-named overrides (`--set key=value`,
a task definition), else its default. A topic setting (`Scope.TOPIC`) is resolved as Kafka resolves
it: the topic's own config, else the broker's override of its first broker synonym (`log.retention.ms`
for `retention.ms`), else the default; coarser synonyms (`log.retention.hours`) are honoured by the
partition log only. A setting that is not `public` is honoured but not offered to clients:
DescribeConfigs does not list it and CreateTopics does not accept it. `log_field` names the
`LogConfig` field a setting feeds, so the log derives its names, defaults and units from here.

This module sits below `log/`, `server/`, `tiered_storage/` and the front ends, and imports none of
them; it holds no state, so any thread may call it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

INT64_MAX = 2**63 - 1
_HOUR_MS = 60 * 60 * 1000
_MINUTE_MS = 60 * 1000

# DescribeConfigs config_source values (Kafka's ConfigSource ids).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# The key of the cluster-wide default among the dynamic broker configs (broker_core.metadata.broker_configs).
DYNAMIC_DEFAULT = "<default>"


class Scope(enum.Enum):
    BROKER = "broker"
    TOPIC = "topic"


class Kind(enum.Enum):
    INT = "int"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the key."""


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker-level name of a topic setting; its value times ``scale`` is the setting's value."""

    name: str
    scale: int = 1

    def parse(self, text: str) -> int:
        """Kafka's reading of a scaled value: negative values (unlimited) keep their meaning unscaled."""
        value = int(text)
        return value if value < 0 else value * self.scale


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its Kafka name, how its string value parses, its default (as Kafka writes it) and doc.

    ``choices`` and ``minimum`` are the checks a topic config must pass before it is stored (the
    partition log adds its own range checks for the fields it feeds); booleans are "true" or "false".
    """

    name: str
    scope: Scope
    kind: Kind
    default: str
    doc: str
    synonyms: tuple[Synonym, ...] = ()  # TOPIC: broker-level names, finest unit first
    choices: tuple[str, ...] = ()  # STRING: the accepted values, in the order messages list them
    minimum: int | None = None
    log_field: str | None = None
    public: bool = True
    dynamic: bool = False  # BROKER: may be changed live, per broker or cluster-wide (IncrementalAlterConfigs)

    @property
    def allowed(self) -> tuple[str, ...]:
        """The values a topic config may take, or () for any integer."""
        return ("true", "false") if self.kind is Kind.BOOLEAN else self.choices

    @property
    def broker_synonym(self) -> str | None:
        """The broker override a topic falls back to (and DescribeConfigs reports as its source)."""
        return self.synonyms[0].name if self.synonyms else None


def _broker(name: str, kind: Kind, default: object, doc: str, *, public: bool = True, dynamic: bool = False,
            minimum: int | None = None) -> Setting:
    return Setting(name, Scope.BROKER, kind, str(default), doc, minimum=minimum, public=public, dynamic=dynamic)


def _topic(
    name: str, kind: Kind, default: object, doc: str, *synonyms: str | Synonym,
    choices: tuple[str, ...] = (), minimum: int | None = None, log_field: str | None = None, public: bool = True,
) -> Setting:
    resolved = tuple(s if isinstance(s, Synonym) else Synonym(s) for s in synonyms)
    return Setting(name, Scope.TOPIC, kind, str(default), doc, resolved, choices, minimum, log_field, public)


_INT, _DOUBLE, _BOOLEAN, _STRING = Kind.INT, Kind.DOUBLE, Kind.BOOLEAN, Kind.STRING

SETTINGS: tuple[Setting, ...] = (
    # Broker settings: Kafka's defaults, except auto.create.topics.enable: Floe creates topics only when
    # asked, so a typo'd topic name is an error rather than a new topic.
    _broker("broker.session.timeout.ms", _INT, 9000, "A broker whose heartbeat stalls this long is fenced."),
    _broker("broker.heartbeat.interval.ms", _INT, 2000, "How often a broker heartbeats its registration."),
    _broker("metadata.poll.interval.ms", _INT, 500, "How often a broker re-reads the metadata image."),
    _broker("min.insync.replicas", _INT, 1, "Default of the topic setting of the same name."),
    _broker("default.replication.factor", _INT, 1, "Replication factor of a topic created without one."),
    _broker("num.partitions", _INT, 1, "Partition count of a topic created without one."),
    _broker("auto.create.topics.enable", _BOOLEAN, "false", "Floe creates topics only when asked."),
    _broker("message.max.bytes", _INT, 1048588, "Largest record batch a partition accepts."),
    _broker("socket.request.max.bytes", _INT, 100 * 1024 * 1024,
            "Largest request a connection may send; a larger or negative size prefix closes the connection "
            "before any of the request is read."),
    _broker("replica.lag.time.max.ms", _INT, 30000, "A follower not caught up for this long leaves the ISR."),
    _broker("replica.fetch.wait.max.ms", _INT, 500, "How long a follower's fetch waits for new data."),
    _broker("replica.high.watermark.checkpoint.interval.ms", _INT, 5000, "How often high watermarks are checkpointed."),
    _broker("replica.fetch.max.bytes", _INT, 1024 * 1024, "Bytes a follower fetches per partition."),
    _broker("replica.fetch.response.max.bytes", _INT, 10 * 1024 * 1024, "Bytes a follower fetches per request."),
    # Fetch at scale (docs/operations.md, "Fetch sessions, replica fetchers and rack-aware reads").
    _broker("num.replica.fetchers", _INT, 1,
            "Fetchers (each with its own connection and fetch session) a broker runs per leader broker it "
            "follows; partitions are spread over them as Kafka spreads them."),
    _broker("max.incremental.fetch.session.cache.slots", _INT, 1000,
            "KIP-227: most incremental fetch sessions a broker keeps (followers' and consumers'); 0 turns them off."),
    _broker("broker.rack", _STRING, "",
            "The broker's rack (availability zone); --rack overrides it. Metadata names it, and KIP-392 "
            "rack-aware reads compare it with the consumer's client.rack."),
    _broker("replica.selector.class", _STRING, "",
            "KIP-392: empty or org.apache.kafka.common.replica.LeaderSelector: consumers read from leaders; "
            "org.apache.kafka.common.replica.RackAwareReplicaSelector: a leader sends a consumer whose "
            "client.rack names another replica's rack to that replica (preferred read replica)."),
    _broker("unclean.leader.election.enable", _BOOLEAN, "false", "Default of the topic setting of the same name."),
    _broker("controlled.shutdown.enable", _BOOLEAN, "true", "Hand leadership over before a broker stops."),
    _broker("auto.leader.rebalance.enable", _BOOLEAN, "true",
            "The controller moves leadership back to preferred replicas (the first assigned) when a broker's"
            " leader imbalance is above leader.imbalance.per.broker.percentage."),
    _broker("leader.imbalance.check.interval.seconds", _INT, 300, "How often the controller checks leader imbalance."),
    _broker("leader.imbalance.per.broker.percentage", _INT, 10,
            "The share (percent) of a broker's preferred partitions that may be led elsewhere before a rebalance."),
    # Replication throttles (KIP-73), as kafka-reassign-partitions --throttle sets them; see docs/operations.md.
    _broker("leader.replication.throttled.rate", _INT, INT64_MAX,
            "Bytes per second a leader sends to the out-of-sync followers of the replicas its topics list in"
            " leader.replication.throttled.replicas; the default is unlimited.", dynamic=True, minimum=0),
    _broker("follower.replication.throttled.rate", _INT, INT64_MAX,
            "Bytes per second a follower fetches for the out-of-sync replicas its topics list in"
            " follower.replication.throttled.replicas; the default is unlimited.", dynamic=True, minimum=0),
    _broker("replication.quota.window.num", _INT, 11,
            "Kafka's samples of the replication throttles' rates; accepted, unused (Floe's throttles are token buckets)."),
    _broker("replication.quota.window.size.seconds", _INT, 1,
            "Kafka's length of one replication throttle sample; accepted, unused (see replication.quota.window.num)."),
    _broker("request.timeout.ms", _INT, 30000, "How long a broker waits for another broker's response."),
    _broker("log.retention.check.interval.ms", _INT, 300000, "How often local retention runs."),
    _broker("offsets.retention.minutes", _INT, 10080, "How long an empty group's committed offsets are kept."),
    _broker("group.initial.rebalance.delay.ms", _INT, 0, "How long the first rebalance of a group waits for members."),
    _broker("group.min.session.timeout.ms", _INT, 1000, "Smallest session timeout a group member may ask for."),
    _broker("group.max.session.timeout.ms", _INT, 1800000, "Largest session timeout a group member may ask for."),
    _broker("group.max.size", _INT, 2147483647, "Most members a group may have."),
    _broker("offsets.retention.check.interval.ms", _INT, 600000, "How often expired offsets are deleted."),
    _broker("offset.metadata.max.bytes", _INT, 4096, "Largest metadata string of a committed offset."),
    # Transaction coordinator (KIP-98): producers' transaction timeouts and the abort of abandoned ones.
    _broker("transaction.max.timeout.ms", _INT, 900000,
            "Largest transaction.timeout.ms a producer may ask for; InitProducerId refuses more."),
    _broker("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, 10000,
            "How often the coordinator aborts transactions left open past their timeout."),
    _broker("floe.transaction.marker.retry.backoff.ms", _INT, 100,
            "Wait before resending transaction markers a partition leader did not write (leader change, broker down)."),
    # Client quotas (KIP-13, KIP-124, KIP-599): the windows their rates are measured over.
    _broker("quota.window.num", _INT, 11, "Samples a client's byte and request-time rates are measured over."),
    _broker("quota.window.size.seconds", _INT, 1, "Length of one sample of a client's byte and request-time rates."),
    _broker("controller.quota.window.num", _INT, 11,
            "Samples of the controller mutation rate; the token bucket holds the quota times the span."),
    _broker("controller.quota.window.size.seconds", _INT, 1, "Length of one sample of the controller mutation rate."),
    # SASL credentials (docs/security.md): the SCRAM credential cache and IAM OAUTHBEARER token checks.
    _broker("floe.scram.credential.cache.ms", _INT, 60000,
            "Longest a broker answers SCRAM/PLAIN logins from a cached credential; AlterUserScramCredentials "
            "empties every broker's cache within one metadata poll, this bounds changes written around the brokers."),
    _broker("floe.sasl.oauthbearer.iam.audience", _STRING, "",
            "The audience IAM OAUTHBEARER tokens must be signed for (x-floe-audience); give each cluster its own. "
            "Empty: IAM tokens cannot be verified."),
    _broker("floe.sasl.oauthbearer.iam.sts.endpoint", _STRING, "",
            "The STS endpoint that verifies IAM tokens, the only host a token may name; empty is the regional "
            "endpoint https://sts.REGION.amazonaws.com (the local stack sets its moto server)."),
    _broker("floe.sasl.oauthbearer.iam.token.max.age.ms", _INT, 900000,
            "Oldest an IAM token's signing time may be (and its X-Amz-Expires at most this)."),
    # Authorization (docs/security.md, "Authorization"): Kafka's names and defaults.
    _broker("authorizer.class.name", _STRING, "",
            "Empty: no authorization (every request is allowed). "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer, "
            "with the same rules): every request is checked against the ACLs."),
    _broker("super.users", _STRING, "",
            "Principals allowed everything, whatever the ACLs say, separated by ';' (User:admin;User:CN=broker-1)."),
    _broker("allow.everyone.if.no.acl.found", _BOOLEAN, "false",
            "With an authorizer, whether a resource no ACL names is open to everyone (false: it is closed)."),
    _broker("floe.super.users.include.brokers", _BOOLEAN, "false",
            "With an authorizer, the principals registered brokers authenticate to their peers as (their "
            "inter-broker principals, never User:ANONYMOUS) are super users too, from the metadata poll that "
            "sees a broker's registration: a broker added to a running cluster is trusted by the others at once, "
            "without super.users naming it and the others restarting. The local stack turns it on when secured."),
    _broker("remote.log.manager.task.interval.ms", _INT, 30000, "How often tiering visits the partitions a broker leads.",
            public=False),
    _broker("remote.log.manager.copier.thread.pool.size", _INT, 4, "Partitions tiered at once.", public=False),
    _broker("remote.log.upload.segments.in.flight", _INT, 2, "Segments of one partition uploaded at once.",
            public=False),
    _broker("remote.log.s3.multipart.threshold.bytes", _INT, 32 * 1024 * 1024,
            "Segments at least this large are uploaded in parts.", public=False),
    _broker("remote.log.s3.multipart.part.bytes", _INT, 8 * 1024 * 1024, "Size of one upload part.", public=False),
    _broker("remote.log.s3.multipart.concurrency", _INT, 4, "Parts of one segment uploaded at once.", public=False),
    _broker("remote.log.reader.chunk.bytes", _INT, 4 * 1024 * 1024, "Bytes of one ranged GET of a remote segment.",
            public=False),
    _broker("remote.log.reader.readahead.chunks", _INT, 1, "Chunks a remote read fetches ahead.", public=False),
    # Transactions, partition side (docs/transactions.md).
    _broker("transaction.partition.verification.enable", _BOOLEAN, "true",
            "KIP-890: a leader asks the transaction coordinator before a transactional write opens a transaction "
            "on a partition, and refuses it (INVALID_TXN_STATE) unless the partition was added to the transaction."),
    # Listener limits (docs/operations.md, "Listener limits"). Kafka's defaults, except
    # queued.max.request.bytes, which Kafka leaves unlimited (-1).
    _broker("queued.max.request.bytes", _INT, 256 * 1024 * 1024,
            "Budget of bytes held by requests larger than 64 KiB being received or handled, broker-wide; when it "
            "is spent, connections stop reading until bytes are released. One request at a time may exceed it, so "
            "a request up to socket.request.max.bytes always proceeds; -1 is unlimited. The default is Kafka's "
            "largest request (socket.request.max.bytes) two and a half times over: far above what producers with "
            "their default 1 MiB max.request.size queue, and a bound a 1 GiB broker task can carry."),
    _broker("max.connections", _INT, 2147483647,
            "Most connections the broker keeps open (replica fetchers of other brokers included); more are closed "
            "as soon as they are accepted."),
    _broker("max.connections.per.ip", _INT, 2147483647, "Most connections open at once from one address."),
    _broker("max.connections.per.ip.overrides", _STRING, "",
            "Per-address exceptions to max.connections.per.ip, as host:count,host:count (names resolved at start)."),
    _broker("connections.max.idle.ms", _INT, 600000,
            "A connection that has completed no request and been sent no response for this long, with none in "
            "progress, is closed (bytes of an unfinished request do not count); 0 or less never closes one."),
    _broker("max.connection.creation.rate", _INT, 2147483647,
            "New connections accepted per second, broker-wide; more are closed as soon as they are accepted."),
    # Metrics (docs/operations.md, "Metrics").
    _broker("metrics.port", _INT, -1,
            "Port of the broker's Prometheus endpoint (GET /metrics, on the broker's --host); 0 picks a free port "
            "(the ready file and stack.json name it); negative: no endpoint and no metrics kept (requests are still "
            "timed for floe.request.slow.ms)."),
    _broker("floe.consumer.lag.sample.ms", _INT, 5000,
            "With metrics on, how often a group coordinator samples the latest offset of the partitions its groups "
            "committed to (kafka_consumergroup_lag and _lag_seconds are as fresh as the last sample)."),
    _broker("floe.event.loop.lag.sample.ms", _INT, -1,
            "With metrics on, how often the broker sets a timer on its event loop and records how late it ran "
            "(floe_event_loop_lag_seconds: how long work on the loop, such as file system calls, held back every "
            "request); zero or negative: not sampled."),
    _broker("floe.request.slow.ms", _INT, -1,
            "A request whose total time (read to response written) reaches this many milliseconds is logged once, "
            "with its API, version, client id, principal and Kafka's time split; negative: none is."),
    # Listeners, TLS and SASL on the Kafka listener (docs/security.md). Kafka's names and defaults; a setting
    # read per listener may also be given as listener.name.<listener>.<setting>.
    _broker("listeners", _STRING, "",
            "The listeners as NAME://host:port,...; empty: one PLAINTEXT listener on the broker's --host/--port."),
    _broker("advertised.listeners", _STRING, "",
            "The address clients are told for each listener (NAME://host:port,...); a listener left out is "
            "advertised as it is bound."),
    _broker("listener.security.protocol.map", _STRING,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "The security protocol of each listener name."),
    _broker("inter.broker.listener.name", _STRING, "",
            "The listener other brokers reach this broker on; empty: the first with security.inter.broker.protocol."),
    _broker("security.inter.broker.protocol", _STRING, "PLAINTEXT",
            "The inter-broker listener's security protocol when inter.broker.listener.name is not set."),
    _broker("ssl.keystore.type", _STRING, "PEM", "PEM or PKCS12 (JKS is not supported)."),
    _broker("ssl.keystore.location", _STRING, "",
            "The broker's certificate chain and private key: one PEM file, or a PKCS12 file."),
    _broker("ssl.keystore.certificate.chain", _STRING, "", "The certificate chain in PEM, inline (keystore type PEM)."),
    _broker("ssl.keystore.key", _STRING, "", "The private key in PEM, inline (keystore type PEM)."),
    _broker("ssl.keystore.password", _STRING, "", "Password of the PKCS12 keystore.", public=False),
    _broker("ssl.key.password", _STRING, "", "Password of an encrypted private key.", public=False),
    _broker("ssl.truststore.type", _STRING, "PEM", "PEM only."),
    _broker("ssl.truststore.location", _STRING, "",
            "PEM file of the CA certificates trusted for client certificates (and, on the client side, brokers')."),
    _broker("ssl.truststore.certificates", _STRING, "", "The trusted CA certificates in PEM, inline."),
    _broker("ssl.client.auth", _STRING, "none",
            "none, requested or required: whether TLS clients are asked for a certificate; with one, the "
            "principal is User:<its subject, RFC 2253>."),
    _broker("ssl.endpoint.identification.algorithm", _STRING, "https",
            "https: a broker checks that a peer broker's certificate names the host it connects to; empty: it "
            "checks the certificate chain only."),
    _broker("ssl.enabled.protocols", _STRING, "TLSv1.2,TLSv1.3",
            "The TLS versions a TLS listener (and this broker's TLS connections to other brokers) accepts: "
            "TLSv1.2 and/or TLSv1.3; older versions are refused. With both, a peer able to do TLSv1.3 gets it."),
    _broker("ssl.handshake.timeout.ms", _INT, 10000,
            "A TLS handshake not complete after this long closes the connection."),
    _broker("sasl.enabled.mechanisms", _STRING, "GSSAPI",
            "SASL mechanisms of SASL listeners: PLAIN (SASL_SSL only), SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; "
            "GSSAPI (Kafka's default) is not supported, so a SASL listener must set this."),
    _broker("sasl.server.max.receive.size", _INT, 524288,
            "Largest frame a connection may send before it has authenticated; a larger one closes it."),
    _broker("connections.max.reauth.ms", _INT, 0,
            "KIP-368: a SASL session lasts this long, then the client must re-authenticate; 0 never expires."),
    _broker("floe.inter.broker.sasl.mechanism", _STRING, "SCRAM-SHA-512",
            "The mechanism this broker authenticates with to other brokers on a SASL inter-broker listener."),
    _broker("floe.inter.broker.sasl.username", _STRING, "", "This broker's user name on a SASL inter-broker listener."),
    _broker("floe.inter.broker.sasl.password", _STRING, "", "This broker's password on a SASL inter-broker listener.",
            public=False),
    _broker("floe.log.format", _STRING, "text",
            "text: one human-readable line per event; json: one JSON object per line (time, level, logger, "
            "message, and topic, partition and epoch fields on partition events), for CloudWatch Logs and "
            "other log stores. The broker image and template.yaml set json."),
    # Topic settings; those of the partition log in LogConfig's field order, the order it applies them in.
    _topic("segment.bytes", _INT, 1024**3, "A segment rolls once it holds this many bytes.",
           "log.segment.bytes", log_field="segment_bytes"),
    _topic("segment.ms", _INT, 7 * 24 * _HOUR_MS, "A segment rolls once its first record is this old.",
           "log.roll.ms", Synonym("log.roll.hours", _HOUR_MS), log_field="segment_ms"),
    _topic("index.interval.bytes", _INT, 4096, "Log bytes between two offset index entries.",
           "log.index.interval.bytes", log_field="index_interval_bytes"),
    _topic("segment.index.bytes", _INT, 10 * 1024**2, "Size of a segment's offset and time indexes.",
           "log.index.size.max.bytes", log_field="segment_index_bytes"),
    _topic("retention.ms", _INT, 7 * 24 * _HOUR_MS, "Age beyond which segments are deleted; -1 is unlimited.",
           "log.retention.ms", Synonym("log.retention.minutes", _MINUTE_MS), Synonym("log.retention.hours", _HOUR_MS),
           log_field="retention_ms"),
    _topic("retention.bytes", _INT, -1, "Size beyond which the oldest segments are deleted; -1 is unlimited.",
           "log.retention.bytes", log_field="retention_bytes"),
    _topic("flush.messages", _INT, INT64_MAX, "Records between forced fsyncs; the default never forces one.",
           "log.flush.interval.messages", log_field="flush_messages"),
    _topic("flush.ms", _INT, INT64_MAX, "Milliseconds between forced fsyncs; the default never forces one.",
           "log.flush.interval.ms", log_field="flush_ms"),
    _topic("message.timestamp.type", _STRING, "CreateTime", "Whose timestamp a record keeps.",
           "log.message.timestamp.type", choices=("CreateTime", "LogAppendTime"), log_field="message_timestamp_type"),
    _topic("max.message.bytes", _INT, 1048588, "Largest record batch the topic accepts.",
           "message.max.bytes", log_field="max_message_bytes"),
    _topic("file.delete.delay.ms", _INT, 60000, "How long a deleted segment's files linger.",
           "log.segment.delete.delay.ms", log_field="file_delete_delay_ms", public=False),
    # Log compaction (issue 24): Kafka's cleaner settings, names and defaults. See docs/operations.md, "Compaction".
    _topic("cleanup.policy", _STRING, "delete",
           "delete: old segments go by retention.ms/retention.bytes; compact: the cleaner keeps the latest record of"
           " each key; both: compacted, and old segments also go by retention.",
           "log.cleanup.policy", choices=("delete", "compact", "compact,delete", "delete,compact"),
           log_field="cleanup_policy"),
    _topic("min.cleanable.dirty.ratio", _DOUBLE, 0.5,
           "A compacted log is cleaned once its uncleaned bytes are at least this share of its cleanable bytes.",
           "log.cleaner.min.cleanable.ratio", log_field="min_cleanable_dirty_ratio"),
    _topic("min.compaction.lag.ms", _INT, 0, "A record stays uncompacted at least this long after it was written.",
           "log.cleaner.min.compaction.lag.ms", log_field="min_compaction_lag_ms"),
    _topic("max.compaction.lag.ms", _INT, INT64_MAX,
           "A record is compacted at most this long after it was written, whatever the dirty ratio.",
           "log.cleaner.max.compaction.lag.ms", log_field="max_compaction_lag_ms"),
    _topic("delete.retention.ms", _INT, 24 * _HOUR_MS,
           "How long a tombstone (a null value) stays readable after the cleaner first saw it.",
           "log.cleaner.delete.retention.ms", log_field="delete_retention_ms"),
    _broker("log.cleaner.threads", _INT, 1, "Logs cleaned at once, each by a cleaner process of its own (Kafka's threads; processes keep the"
            " cleaning's Python work off the broker's GIL).", dynamic=True, minimum=1),
    _broker("log.cleaner.dedupe.buffer.size", _INT, 128 * 1024 * 1024,
            "Budget of the cleaners' key maps, shared by the cleaners; keys are counted at 24 bytes each as Kafka"
            " counts them (a Python map uses more per key).", dynamic=True, minimum=1024 * 1024),
    _broker("log.cleaner.backoff.ms", _INT, 15000, "How long a cleaner waits when no log needs cleaning.",
            dynamic=True, minimum=0),
    _broker("log.cleaner.io.max.bytes.per.second", _DOUBLE, "1.7976931348623157E308",
            "Bytes per second the cleaners read and write together (each holds an equal share); the default is"
            " unlimited.", dynamic=True, minimum=1),
    _topic("compression.type", _STRING, "producer", "Accepted for Kafka tools; batches are stored as the producer compressed them.",
           "compression.type", choices=("producer", "uncompressed")),
    _topic("local.retention.bytes", _INT, -2, "Local size limit of a tiered topic; -2 is retention.bytes.",
           "log.local.retention.bytes"),
    _topic("local.retention.ms", _INT, -2, "Local age limit of a tiered topic; -2 is retention.ms.",
           "log.local.retention.ms"),
    _topic("min.insync.replicas", _INT, 1, "In-sync replicas an acks=all produce needs.",
           "min.insync.replicas", minimum=1),
    _topic("remote.storage.enable", _BOOLEAN, "false", "Tier sealed segments to S3."),
    _topic("leader.replication.throttled.replicas", _STRING, "",
           "Replicas (partition:broker,... or *) whose leader is held to leader.replication.throttled.rate"
           " when it serves an out-of-sync follower."),
    _topic("follower.replication.throttled.replicas", _STRING, "",
           "Replicas (partition:broker,... or *) that fetch within follower.replication.throttled.rate while"
           " out of sync."),
    _topic("unclean.leader.election.enable", _BOOLEAN, "false", "Elect a leader outside the ISR when none is left.",
           "unclean.leader.election.enable"),
    # Resource limits (issue 22): decompression and partition counts. See docs/operations.md.
    _topic("floe.message.max.decompressed.bytes", _INT, 64 * 1024 * 1024,
           "Most bytes a compressed batch's records may decompress to (64 x message.max.bytes, rounded): a"
           " leader refuses a larger one with CORRUPT_MESSAGE, readers stop at it. Set on the broker.",
           log_field="max_decompressed_bytes", public=False),
    _broker("floe.max.partitions", _INT, 100_000,
            "Most partitions the cluster holds; CreateTopics past it gets POLICY_VIOLATION."),
    _broker("floe.max.replicas.per.broker", _INT, 4_000,
            "Most partition replicas per live broker; CreateTopics that would pass it gets POLICY_VIOLATION."),
)

BROKER_SETTINGS: dict[str, Setting] = {s.name: s for s in SETTINGS if s.scope is Scope.BROKER}
TOPIC_SETTINGS: dict[str, Setting] = {s.name: s for s in SETTINGS if s.scope is Scope.TOPIC}

# What DescribeConfigs lists for a broker: the public broker settings and their defaults.
BROKER_DEFAULTS: dict[str, str] = {s.name: s.default for s in BROKER_SETTINGS.values() if s.public}


class BrokerOverrides(Protocol):
    """Whatever carries the broker's Kafka-named overrides (the broker's config)."""

    @property
    def overrides(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a sensitive setting, whose value is never sent (Kafka's is_sensitive)
    source: int
    sensitive: bool = False


def is_sensitive(name: str) -> bool:
    """Passwords and private keys (also as listener.name.<listener>.<setting>): DescribeConfigs hides them."""
    return name.endswith(("password", "ssl.keystore.key", "sasl.jaas.config"))


def parse_overrides(pairs: Iterable[str] | None, option: str | None = None) -> dict[str, str]:
    """`["key=value", ...]` (as given to --set, or to ``option``) to a dict; ConfigError on a pair without '='."""
    result: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {pair!r} is not KEY=VALUE" if option else f"expected key=value, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


def broker_setting(overrides: Mapping[str, str], name: str) -> str:
    """A broker setting's value: its override, else its default; ConfigError if Floe has no such setting."""
    if name in overrides:
        return overrides[name]
    if name in BROKER_SETTINGS:
        return BROKER_SETTINGS[name].default
    raise ConfigError(f"unknown broker config {name!r}")


def int_setting(overrides: Mapping[str, str], name: str) -> int:
    """An integer broker setting; ConfigError (a ValueError) naming it if it does not parse."""
    value = broker_setting(overrides, name)
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def bool_setting(overrides: Mapping[str, str], name: str) -> bool:
    value = broker_setting(overrides, name).lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value == "true"


def check_broker_overrides(overrides: Mapping[str, str]) -> None:
    """Parse every integer broker setting given; names Floe does not know are left to the log and Kafka tools."""
    for name in overrides:
        setting = BROKER_SETTINGS.get(name)
        if setting is not None and setting.kind is Kind.INT:
            int_setting(overrides, name)


def _resolve(setting: Setting, configs: Mapping[str, str], broker: BrokerOverrides) -> ConfigEntry:
    if setting.name in configs:
        return ConfigEntry(setting.name, configs[setting.name], SOURCE_TOPIC)
    synonym = setting.broker_synonym
    if synonym is not None and synonym in broker.overrides:
        return ConfigEntry(setting.name, broker.overrides[synonym], SOURCE_STATIC_BROKER)
    return ConfigEntry(setting.name, setting.default, SOURCE_DEFAULT)


def effective(configs: Mapping[str, str], broker: BrokerOverrides, name: str) -> str:
    """A topic setting's value: the topic's config, else the broker's synonym, else the default."""
    return _resolve(TOPIC_SETTINGS[name], configs, broker).value


def describe_topic_configs(
    configs: Mapping[str, str], broker: BrokerOverrides, keys: set[str] | None
) -> list[ConfigEntry]:
    """The public topic settings (or those named in ``keys``), by name, with the source each value came from."""
    return [
        _resolve(TOPIC_SETTINGS[name], configs, broker)
        for name in sorted(name for name, s in TOPIC_SETTINGS.items() if s.public)
        if keys is None or name in keys
    ]


def live_broker_entry(name: str, broker_id: int, overrides: Mapping[str, str],
                      dynamic: Mapping[str, Mapping[str, str]]) -> ConfigEntry:
    """A broker setting's value now, and its source: for a dynamic setting the broker's own dynamic
    value, else the cluster-wide dynamic default (``dynamic``, as the metadata image carries them);
    then the broker's static override, else the default."""
    setting = BROKER_SETTINGS.get(name)
    if setting is not None and setting.dynamic:
        own = dynamic.get(str(broker_id), {})
        if name in own:
            return ConfigEntry(name, own[name], SOURCE_DYNAMIC_BROKER)
        cluster = dynamic.get(DYNAMIC_DEFAULT, {})
        if name in cluster:
            return ConfigEntry(name, cluster[name], SOURCE_DYNAMIC_DEFAULT_BROKER)
    source = SOURCE_STATIC_BROKER if name in overrides else SOURCE_DEFAULT
    return ConfigEntry(name, broker_setting(overrides, name), source)


def live_broker_setting(name: str, broker_id: int, overrides: Mapping[str, str],
                        dynamic: Mapping[str, Mapping[str, str]]) -> str:
    """`live_broker_entry`'s value."""
    return live_broker_entry(name, broker_id, overrides, dynamic).value or ""


def check_dynamic_broker_config(name: str, value: str) -> None:
    """Refuse (ConfigError naming it) a setting that cannot be changed live or a value it cannot take."""
    setting = BROKER_SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown broker config {name!r}")
    if not setting.dynamic:
        raise ConfigError(f"cannot update {name} dynamically; the dynamic broker configs are "
                          f"{', '.join(sorted(n for n, s in BROKER_SETTINGS.items() if s.dynamic))}")
    try:
        if setting.kind is Kind.INT:
            number: float = int(value)
        elif setting.kind is Kind.DOUBLE:
            number = float(value)
        elif setting.kind is Kind.BOOLEAN:
            bool_setting({name: value}, name)
            return
        else:
            return
    except ValueError:
        raise ConfigError(f"{name} must be {'an integer' if setting.kind is Kind.INT else 'a number'}, "
                          f"got {value!r}") from None
    if setting.minimum is not None and number < setting.minimum:
        raise ConfigError(f"{name} must be at least {setting.minimum}, got {value!r}")


def describe_broker_configs(overrides: Mapping[str, str], keys: set[str] | None, broker_id: int = -1,
                            dynamic: Mapping[str, Mapping[str, str]] | None = None) -> list[ConfigEntry]:
    """The public broker settings and every override (or those named in ``keys``), by name, with their
    source (dynamic ones from ``dynamic``, as `live_broker_entry` resolves them)."""
    entries = []
    for name in sorted(set(BROKER_DEFAULTS) | set(overrides)):
        if keys is not None and name not in keys:
            continue
        entry = live_broker_entry(name, broker_id, overrides, dynamic or {})
        if is_sensitive(name):
            entries.append(ConfigEntry(name, None, entry.source, sensitive=True))
        else:
            entries.append(entry)
    return entries


def describe_dynamic_default_configs(dynamic: Mapping[str, Mapping[str, str]], keys: set[str] | None
                                     ) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (the BROKER resource named ""), as Kafka describes them."""
    return [ConfigEntry(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER)
            for name, value in sorted(dynamic.get(DYNAMIC_DEFAULT, {}).items()) if keys is None or name in keys]


def markdown_reference() -> str:
    """docs/configuration.md, generated from the declarations above (`python -m broker_core.settings`)."""
    lines = [
        "# Configuration",
        "",
        "Generated from `broker_core/settings.py` by `python -m broker_core.settings > docs/configuration.md`;",
        "a test fails when this page and the registry differ.",
        "",
        "## Broker settings",
        "",
        "Given to a broker as `--set name=value` (`floe local up --set ...` passes them to every broker).",
        "",
        "| Name | Type | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    for s in BROKER_SETTINGS.values():
        hidden = "" if s.public else " Not listed by DescribeConfigs."
        dynamic = " Dynamic: may be changed live (`floe configs alter --entity-type brokers`)." if s.dynamic else ""
        lines.append(f"| `{s.name}` | {_type_text(s)} | `{s.default}` | {s.doc}{hidden}{dynamic} |")
    lines += [
        "",
        "## Topic settings",
        "",
        "Given as a topic's configs at creation (`floe topics create --config name=value`). A topic without",
        "its own value takes the broker's first synonym if the broker sets it, else the default; the partition",
        "log also honours the coarser synonyms.",
        "",
        "| Name | Type | Default | Broker synonyms | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in sorted(TOPIC_SETTINGS.values(), key=lambda s: s.name):
        synonyms = ", ".join(f"`{synonym.name}`" for synonym in s.synonyms)
        hidden = "" if s.public else " Not accepted in a topic's configs."
        lines.append(f"| `{s.name}` | {_type_text(s)} | `{s.default}` | {synonyms} | {s.doc}{hidden} |")
    return "\n".join(lines) + "\n"


def _type_text(setting: Setting) -> str:
    text = setting.kind.value
    if setting.choices:
        text += ": " + ", ".join(setting.choices)
    if setting.minimum is not None:
        text += f" ≥ {setting.minimum}"
    return text


if __name__ == "__main__":
    print(markdown_reference(), end="")
