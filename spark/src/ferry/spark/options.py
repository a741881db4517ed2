"""The data source's options, parsed once on the driver into plain frozen dataclasses: they are
pickled to the executors, so they hold no sockets or clients (Kafka source conventions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.client.route import parse_namesrv
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.names import check_group, check_topic
from ferry.protocol.sql_filter import check_sql

NAMESRV = "ferry.namesrv"
FILTER = "ferry.filter"  # an SQL92 filter the brokers apply (enablePropertyFilter=true)
ACCESS_KEY = "ferry.accessKey"
SECRET_KEY = "ferry.secretKey"  # noqa: S105 - an option's name, not a secret
TLS_SERVER_KEY = "ferry.tlsServerKey"  # with tlsEnable: the cluster's server.key (or the key)
DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_READ_GROUP = "ferry-spark"  # the group reads pull as when no `group` is given
DEFAULT_WRITE_GROUP = "ferry-spark-writer"
DEFAULT_PULL_BATCH = 1024  # messages per pull request of a reading task
DEFAULT_MAX_PER_PARTITION = 100_000  # a queue range longer than this is split into tasks
DEFAULT_TIMEOUT_MS = 10_000


def _int(options: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParameterError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise InvalidParameterError(f"option {name} must be at least {minimum}, not {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidParameterError(f"option {name} must be true or false, not {raw!r}")


def _credentials(options: Mapping[str, str]) -> Credentials | None:
    """ferry.accessKey / ferry.secretKey: both or neither (authentication on). They travel to
    the executors with the options, as Kafka's SASL settings do."""
    access, secret = options.get(ACCESS_KEY) or "", options.get(SECRET_KEY) or ""
    if not access and not secret:
        return None
    if not access or not secret:
        raise InvalidParameterError(f"give both {ACCESS_KEY} and {SECRET_KEY}, or neither")
    return Credentials(access, secret)


def _namesrv(options: Mapping[str, str]) -> str:
    namesrv = options.get(NAMESRV) or DEFAULT_NAMESRV
    parse_namesrv(namesrv)
    return namesrv


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: str  # "earliest", "latest" or JSON {"topic": {"broker-a:0": offset}}
    ending: str  # batch only: "latest" or JSON
    group: str | None  # commit progress as this group (streaming)
    max_per_trigger: int | None
    fail_on_data_loss: bool
    max_per_partition: int
    min_partitions: int
    pull_batch: int
    timeout_ms: int
    credentials: Credentials | None = None
    tls_server_key: str | None = None
    sql_filter: str | None = None  # rows only of the messages it selects

    @property
    def pull_group(self) -> str:
        return self.group or DEFAULT_READ_GROUP


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Kafka's defaults: a batch read starts at earliest, a new streaming query at latest."""
    raw = options.get("subscribe") or ""
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise InvalidParameterError("option subscribe (comma-separated topics) is required")
    for topic in topics:
        check_topic(topic)
    group = options.get("group") or None
    if group is not None:
        check_group(group)
    starting = (options.get("startingOffsets") or ("latest" if streaming else "earliest")).strip()
    ending = (options.get("endingOffsets") or "latest").strip()
    if streaming and options.get("endingOffsets"):
        raise InvalidParameterError("endingOffsets is for batch reads only")
    if not streaming and starting.lower() == "latest":
        raise InvalidParameterError("startingOffsets=latest is for streaming reads only")
    if ending.lower() == "earliest":
        raise InvalidParameterError("endingOffsets cannot be earliest")
    max_per_trigger = options.get("maxOffsetsPerTrigger")
    sql_filter = options.get(FILTER) or None
    if sql_filter is not None:
        check_sql(sql_filter)  # a bad one fails the query here, naming where it is wrong
    return ReadOptions(
        namesrv=_namesrv(options),
        topics=topics,
        starting=starting,
        ending=ending,
        group=group,
        max_per_trigger=_int(options, "maxOffsetsPerTrigger", 0) if max_per_trigger else None,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_per_partition=_int(options, "maxOffsetsPerPartition", DEFAULT_MAX_PER_PARTITION),
        min_partitions=_int(options, "minPartitions", 1),
        pull_batch=_int(options, "ferry.pullBatchSize", DEFAULT_PULL_BATCH),
        timeout_ms=_int(options, "ferry.timeoutMs", DEFAULT_TIMEOUT_MS),
        credentials=_credentials(options),
        tls_server_key=options.get(TLS_SERVER_KEY) or None,
        sql_filter=sql_filter,
    )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv: str
    topic: str | None  # overrides the topic column
    group: str
    timeout_ms: int
    write_id: str  # part of every message's deterministic msg id (see writer.py)
    credentials: Credentials | None = None
    tls_server_key: str | None = None


def write_options(options: Mapping[str, str], write_id: str) -> WriteOptions:
    topic = options.get("topic") or None
    if topic is not None:
        check_topic(topic)
    group = options.get("ferry.producerGroup") or DEFAULT_WRITE_GROUP
    check_group(group)
    return WriteOptions(
        namesrv=_namesrv(options),
        topic=topic,
        group=group,
        timeout_ms=_int(options, "ferry.timeoutMs", DEFAULT_TIMEOUT_MS),
        write_id=options.get("ferry.writeId") or write_id,
        credentials=_credentials(options),
        tls_server_key=options.get(TLS_SERVER_KEY) or None,
    )
