"""Typed service configuration from broker.conf, the environment and CLI flags.

Precedence, lowest first: defaults, the broker.conf file, FERRY_<key> environment variables
(plus NAMESRV_ADDR, as RocketMQ), then `--set key=value` flags. Keys are RocketMQ's
broker.conf names; unknown keys are reported once and ignored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ferry.protocol.errors import ConfigError
from ferry.runtime.config_loading import (
    ALIASES,
    OVERLAY_FILE,
    C,
    known_keys,
    load_config,
    overlay_path,
    parse_overrides,
    read_overlay,
)
from ferry.runtime.security.config import SecurityConfig

__all__ = [
    "ALIASES",
    "DEFAULT_DELAY_LEVELS",
    "OVERLAY_FILE",
    "BrokerConfig",
    "C",
    "NamesrvConfig",
    "ProxyConfig",
    "known_keys",
    "load_config",
    "overlay_path",
    "parse_delay_levels",
    "parse_overrides",
    "read_overlay",
]

log = logging.getLogger("ferry.config")

_SPECIAL_NAMES = {"broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2"}


def _conf_name(field: str) -> str:
    if field in _SPECIAL_NAMES:
        return _SPECIAL_NAMES[field]
    head, *rest = field.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


METRICS_EXPORTER_TYPES = ("DISABLE", "PROM", "OTLP_GRPC", "LOG")
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
MAX_IPC_PATH = 100  # longer ipc:// paths do not fit in a unix socket address
GiB = 1024 * 1024 * 1024


class NamesrvConfig(SecurityConfig, rename=_conf_name, kw_only=True):
    listen_port: int = 9876
    listen_host: str = "127.0.0.1"
    # RocketMQ's remoting protocol for RocketMQ's own clients, on listenHost (0: a free port;
    # -1: not served)
    rocketmq_listen_port: int = -1
    # how often silent brokers are looked for
    scan_not_active_broker_interval: int = 5000
    kv_config_path: str = ""

    def check(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        if not -1 <= self.rocketmq_listen_port <= 65535:
            raise ConfigError(
                f"rocketmqListenPort {self.rocketmq_listen_port} is not a port (-1: none)"
            )
        if self.scan_not_active_broker_interval <= 0:
            raise ConfigError("scanNotActiveBrokerInterval must be more than 0 ms")
        self.check_security()


class ProxyConfig(SecurityConfig, rename=_conf_name, kw_only=True):
    """The gRPC proxy's (services/proxy): RocketMQ 5's clients dial proxyListenPort on
    listenHost; it finds the brokers through namesrvAddr, as a client does."""

    namesrv_addr: str = "127.0.0.1:9876"
    listen_host: str = "127.0.0.1"
    proxy_listen_port: int = 8081  # 0: a free port
    # the largest body a client may send, given to the clients in their Settings
    max_message_size: int = 4 * 1024 * 1024
    # RocketMQ's proxy keys: a push consumer's receive names no invisible time and gets this
    # one; its messages are renewed for as long again when renewAheadTimeMillis is left, for
    # at most renewMaxTimeMillis (services/proxy renew.py)
    default_invisible_time_mills: int = 60_000
    renew_ahead_time_millis: int = 10_000
    renew_max_time_millis: int = 3 * 3600 * 1000
    # tlsEnable: the gRPC port serves TLS with this PEM certificate (chain) and its PEM key
    # (RocketMQ's tls.server.certPath / tls.server.keyPath); the CURVE keys (tlsServerKeyFile,
    # tlsInternalKeyFile) are then what the proxy reaches the cluster with
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    # as the broker's keys; PROM: the proxy's own /metrics, beside the broker's 5557
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = 5558
    metrics_prom_exporter_host: str = ""  # empty: listenHost
    metrics_grpc_exporter_target: str = ""

    def check(self) -> None:
        if not self.namesrv_addr.strip():
            raise ConfigError("namesrvAddr is required (host:port[;host:port])")
        if not 1000 <= self.default_invisible_time_mills <= 12 * 3600 * 1000:
            raise ConfigError("defaultInvisibleTimeMills must be between 1 s and 12 h")
        if not 0 < self.renew_ahead_time_millis < self.default_invisible_time_mills:
            raise ConfigError("renewAheadTimeMillis must be above 0 and below the invisible time")
        if self.renew_max_time_millis < 0:
            raise ConfigError("renewMaxTimeMillis must not be negative")
        if not 0 <= self.proxy_listen_port <= 65535:
            raise ConfigError(f"proxyListenPort {self.proxy_listen_port} is not a port")
        if self.metrics_exporter_type not in METRICS_EXPORTER_TYPES:
            raise ConfigError(
                "metricsExporterType must be one of " + ", ".join(METRICS_EXPORTER_TYPES)
            )
        if not 0 <= self.metrics_prom_exporter_port <= 65535:
            raise ConfigError(
                f"metricsPromExporterPort {self.metrics_prom_exporter_port} is not a port"
            )
        if not 0 < self.max_message_size <= 64 * 1024 * 1024:
            raise ConfigError("maxMessageSize must be between 1 byte and 64 MiB")
        self.check_security()
        if self.tls_enable and not (self.tls_server_cert_path and self.tls_server_key_path):
            raise ConfigError(
                "tlsEnable=true on the proxy needs tlsServerCertPath and tlsServerKeyPath "
                "(the PEM certificate and key its gRPC port serves TLS with)"
            )

    @property
    def advertised_host(self) -> str:
        return "127.0.0.1" if self.listen_host in ("", "0.0.0.0", "*") else self.listen_host


class BrokerConfig(SecurityConfig, rename=_conf_name, kw_only=True):
    broker_cluster_name: str = "DefaultCluster"
    # {"username": "...", "password": "..."}: the Super user remoting creates at its first start
    init_authentication_user: str = ""
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    namesrv_addr: str = ""
    listen_port: int = 10911
    listen_host: str = "127.0.0.1"
    # RocketMQ's remoting protocol for RocketMQ's own clients (broker-remoting's door), on
    # listenHost (0: a free port; -1: not served); the name servers route RocketMQ clients here
    rocketmq_listen_port: int = -1
    ha_listen_port: int = 0  # 0: listenPort + 1
    # HA (ha-replicator): a slave reports its offset at least this often; a slave further than
    # haMaxGapNotInSync bytes behind is not in sync (SYNC_MASTER answers SLAVE_NOT_AVAILABLE);
    # bytes per transfer; a slave's master HA address (host:port; empty: the launcher's)
    ha_send_heartbeat_interval: int = 5000
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    ha_transfer_batch_size: int = 1024 * 1024
    ha_master_address: str = ""
    # controller mode (RocketMQ 5): the group's master is elected by the controller among its
    # in-sync replicas; brokerId is then this replica's id (>= 1) and the master registers
    # with the name servers as id 0. A slave more than haMaxTimeSlaveNotCatchup ms behind
    # leaves the in-sync set; allAckInSyncStateSet: SYNC_MASTER waits for every in-sync
    # replica (else one); below minInSyncReplicas in sync, writes are refused; a lower
    # brokerElectionPriority wins an election between equally caught-up replicas; heartbeats
    # to the controller every brokerHeartbeatInterval ms
    enable_controller_mode: bool = False
    controller_addr: str = ""
    ha_max_time_slave_not_catchup: int = 15_000
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = 1
    broker_election_priority: int = 2**31 - 1
    broker_heartbeat_interval: int = 1000
    # a slave's remoting copies topics, groups and offsets from its master this often (ms)
    slave_synchronize_interval: int = 10_000
    broker_ip1: str = ""  # advertised address; empty: listen host (or 127.0.0.1)
    broker_ip2: str = ""
    broker_permission: int = 6
    store_path_root_dir: str = "~/store"
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    mapped_file_size_commit_log: int = GiB
    mapped_file_size_consume_queue: int = 6_000_000
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    max_message_size: int = 4 * 1024 * 1024
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    register_name_server_period: int = 30_000
    # how long name servers keep routing to this broker without hearing from it (RocketMQ:
    # 120 s, fixed in the name server; 10 s as brokerNotActiveTimeoutMillis). Ferry's name
    # servers do not see a connection close, so a killed broker leaves routes only by expiry.
    broker_not_active_timeout_millis: int = 120_000
    long_polling_enable: bool = True
    # SQL92 subscriptions (MessageSelector.by_sql), filtered by the store; refused when false
    enable_property_filter: bool = False
    # a pop with init_mode "fresh" (the gRPC proxy's) starts a new group at a queue's first
    # message when that was stored less than this long ago (and none was deleted); else at
    # the queue's end. Ferry's stand-in for RocketMQ's "first message still in memory".
    pop_init_fresh_millis: int = 30 * 60 * 1000
    # request/reply: a copy of each reply is stored in <cluster>_REPLY_TOPIC (RocketMQ's key)
    store_reply_message_enable: bool = True
    # remoting reads pulled records from the store's CommitLog files when it sees them (one
    # machine, one storePathRootDir) instead of receiving them from the store; false: never
    remoting_reads_commit_log: bool = True
    # the index reads appended records from those files (the feed then carries notices only
    # to it) instead of receiving them over the store's feed; false: always over the feed
    index_reads_commit_log: bool = True
    flush_consumer_offset_interval: int = 5000
    # requests held or in flight above this get SYSTEM_BUSY at once
    max_pending_requests: int = 10_000
    # internal endpoints between the broker's services; empty: derived from the store path
    store_endpoint: str = ""
    store_feed_endpoint: str = ""
    # the index service's endpoint (QUERY_MESSAGE); empty: queries by key are not served
    index_endpoint: str = ""
    # the scheduler's endpoint (delay levels, timers, retries; its status); empty: delayed and
    # timer sends are refused and runtime info has no scheduler keys
    scheduler_endpoint: str = ""
    # the transaction check-back service's endpoint (half messages without an end are checked
    # with their producers through remoting); empty: transactions are stored and ended, but
    # never checked back
    checkback_endpoint: str = ""
    # where remoting reaches its group's ha-replicator (SYNC_MASTER acks); empty: the HA
    # address it advertises (brokerIP1:haListenPort), which containers cannot always reach
    ha_endpoint: str = ""
    # where a slave's remoting reaches its master's for metadata sync; empty: the master's
    # address in the routes (brokerIP1:listenPort), which containers cannot always reach
    master_endpoint: str = ""
    # timer messages (RocketMQ 5): the latest delivery time a message may ask for
    timer_max_delay_sec: int = 259_200
    # transaction check-back (its own service): half messages without an end are checked once
    # older than transactionTimeOut ms, every transactionCheckInterval ms, at most
    # transactionCheckMax times, then moved to TRANS_CHECK_MAX_TIME_TOPIC
    transaction_time_out: int = 6000
    transaction_check_interval: int = 60_000
    transaction_check_max: int = 15
    # broker-store retention and disk guard (RocketMQ's diskSpaceWarningLevelRatio: above it,
    # writes are refused; cleanResourceInterval: how often retention runs)
    disk_space_warning_level_ratio: int = 90
    clean_resource_interval: int = 10_000
    # testing knob: a used-disk percentage that replaces the measured one (-1: measure)
    disk_used_ratio_override: int = -1
    # OpenTelemetry metrics (RocketMQ 5's keys): DISABLE, PROM (remoting serves the broker
    # group's /metrics on metricsPromExporterHost:Port), OTLP_GRPC (to metricsGrpcExporterTarget
    # or the OTEL_* endpoint), LOG; an OTEL_* endpoint alone also exports metrics over OTLP
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""
    metrics_grpc_exporter_target: str = ""

    @property
    def store_root(self) -> Path:
        return Path(os.path.expanduser(self.store_path_root_dir))

    def run_endpoint(self, socket_name: str) -> str:
        """The default endpoint of a broker-internal service: an ipc socket under
        <storePathRootDir>/run, or tcp on a free port of 127.0.0.1 when that path is too long
        for a unix socket address."""
        path = str(self.store_root.resolve() / "run" / socket_name)
        return f"ipc://{path}" if len(path) <= MAX_IPC_PATH else "tcp://127.0.0.1:0"

    @property
    def advertised_host(self) -> str:
        if self.broker_ip1:
            return self.broker_ip1
        return "127.0.0.1" if self.listen_host in ("", "0.0.0.0", "*") else self.listen_host

    @property
    def is_sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def all_ack_enforced(self) -> bool:
        """allAckInSyncStateSet in force: a SYNC_MASTER in controller mode, as in RocketMQ.
        Sends then wait for every in-sync slave, and readers see only what they all hold."""
        return (
            self.enable_controller_mode
            and self.broker_role == "SYNC_MASTER"
            and self.all_ack_in_sync_state_set
        )

    @property
    def reads_gated(self) -> bool:
        """Queue reads stop at the in-sync set's confirm offset: controller mode on a
        SYNC_MASTER, and on its slaves (consumers read them while the master is gone), with
        or without allAckInSyncStateSet (as RocketMQ 5's confirmOffset): a record not every
        replica that may be elected holds may be cut by a failover, so no consumer sees it."""
        return self.enable_controller_mode and self.broker_role != "ASYNC_MASTER"

    def check(self) -> None:
        self.check_security()
        self.init_user()
        if self.broker_not_active_timeout_millis < 2 * min(
            self.register_name_server_period, 60_000
        ):
            raise ConfigError(
                f"brokerNotActiveTimeoutMillis {self.broker_not_active_timeout_millis} must be at "
                "least twice registerNameServerPeriod, or the broker drops out between "
                "registrations"
            )
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise ConfigError(
                f"brokerRole must be ASYNC_MASTER, SYNC_MASTER or SLAVE, not {self.broker_role!r}"
            )
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError(
                f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}"
            )
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        if self.mapped_file_size_commit_log < 64 * 1024:
            raise ConfigError("mappedFileSizeCommitLog must be at least 65536 bytes")
        if self.mapped_file_size_consume_queue < 20 or self.mapped_file_size_consume_queue % 20:
            raise ConfigError(
                "mappedFileSizeConsumeQueue must be a positive multiple of 20 "
                "(one ConsumeQueue entry)"
            )
        if not 0 < self.max_message_size <= 64 * 1024 * 1024:
            raise ConfigError("maxMessageSize must be between 1 byte and 64 MiB")
        if self.broker_id < 0:
            raise ConfigError("brokerId must be 0 (master) or more (slave)")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ConfigError("diskMaxUsedSpaceRatio must be within 10..95")
        if not 0 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort {self.ha_listen_port} is not a port")
        if self.ha_send_heartbeat_interval < 10 or self.slave_synchronize_interval < 10:
            raise ConfigError("haSendHeartbeatInterval and slaveSynchronizeInterval: >= 10 ms")
        if self.ha_max_gap_not_in_sync < 0 or not 4096 <= self.ha_transfer_batch_size <= 1 << 26:
            raise ConfigError(
                "haMaxGapNotInSync must be >= 0, haTransferBatchSize within 4096..67108864"
            )
        if self.enable_controller_mode:
            self._check_controller_mode()
        elif (self.broker_role == "SLAVE") != (self.broker_id > 0):
            raise ConfigError("a SLAVE has brokerId > 0 and a master brokerId 0")
        parse_delay_levels(self.message_delay_level)
        if not 1 <= self.timer_max_delay_sec <= 400 * 86_400:
            raise ConfigError("timerMaxDelaySec must be within 1..34560000 (400 days)")
        if self.transaction_time_out < 0 or self.transaction_check_interval < 10:
            raise ConfigError(
                "transactionTimeOut must be at least 0 ms, transactionCheckInterval at least 10 ms"
            )
        if not 1 <= self.transaction_check_max <= 10_000:
            raise ConfigError("transactionCheckMax must be within 1..10000")
        if self.metrics_exporter_type not in METRICS_EXPORTER_TYPES:
            raise ConfigError(
                "metricsExporterType must be one of " + ", ".join(METRICS_EXPORTER_TYPES)
            )
        if not 0 <= self.metrics_prom_exporter_port <= 65535:
            raise ConfigError(
                f"metricsPromExporterPort {self.metrics_prom_exporter_port} is not a port"
            )

    def _check_controller_mode(self) -> None:
        if self.broker_id < 1:
            raise ConfigError(
                "with enableControllerMode=true, brokerId is this replica's id within its group "
                "and must be 1 or more (the master registers as 0)"
            )
        if not self.controller_addr:
            raise ConfigError(
                "enableControllerMode=true needs controllerAddr=host:port[;host:port]"
            )
        for addr in self.controller_addr.split(";"):
            host, _, port = addr.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ConfigError(f"controllerAddr {addr!r} is not host:port")
        if self.ha_max_time_slave_not_catchup < 100 or self.broker_heartbeat_interval < 10:
            raise ConfigError(
                "haMaxTimeSlaveNotCatchup must be >= 100 ms, brokerHeartbeatInterval >= 10 ms"
            )
        if self.min_in_sync_replicas < 1:
            raise ConfigError("minInSyncReplicas must be 1 or more")

    def init_user(self) -> tuple[str, str] | None:
        """initAuthenticationUser as (username, password), None when not set."""
        text = self.init_authentication_user.strip()
        if not text:
            return None
        try:
            raw = json.loads(text)
            user, password = str(raw["username"]), str(raw["password"])
        except (ValueError, TypeError, KeyError):
            user = password = ""
        if not user or not password:
            raise ConfigError(
                'initAuthenticationUser is not {"username":"...","password":"..."} '
                "with non-empty values"
            )
        return user, password

    @property
    def registered_broker_id(self) -> int:
        """The id this broker registers with the name servers: its brokerId, or in controller
        mode 0 while it is master (its brokerId is then its replica id)."""
        if self.enable_controller_mode and self.broker_role != "SLAVE":
            return 0
        return self.broker_id

    @property
    def delay_levels_ms(self) -> list[int]:
        """messageDelayLevel in ms; level n waits delay_levels_ms[n - 1]."""
        return parse_delay_levels(self.message_delay_level)


_DELAY_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DELAY_LEVELS = 64


def parse_delay_levels(text: str) -> list[int]:
    """'1s 5s 10s 30s 1m ...' -> [1000, 5000, ...]; raises ConfigError naming the bad item."""
    levels: list[int] = []
    for item in text.split():
        number = item.rstrip("smhd")
        unit = item[len(number) :]
        if unit not in _DELAY_UNITS_MS or not number.isdigit() or int(number) <= 0:
            raise ConfigError(
                f"messageDelayLevel item {item!r} is not a positive number with a unit "
                "(ms, s, m, h, d)"
            )
        levels.append(int(number) * _DELAY_UNITS_MS[unit])
    if not 1 <= len(levels) <= MAX_DELAY_LEVELS:
        raise ConfigError(f"messageDelayLevel needs 1 to {MAX_DELAY_LEVELS} levels")
    return levels
