"""The console's configuration, under the same loading rules as every service (defaults, a
properties file, FERRY_<key> variables and NAMESRV_ADDR, then --set and the flags)."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ferry.admin.controller import parse_controllers
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import ConfigError, InvalidParameterError
from ferry.runtime.config import _conf_name

MiB = 1024 * 1024
# the CLI's variables (sdk ferry/cli/credentials.py), taken by the console alike
ACCESS_ENV = "FERRY_ACCESS_KEY"
SECRET_ENV = "FERRY_SECRET_KEY"  # noqa: S105 - a variable's name, not a secret
TLS_ENV = "FERRY_TLS_SERVER_KEY"


class ConsoleConfig(msgspec.Struct, rename=_conf_name, kw_only=True):
    namesrv_addr: str = "127.0.0.1:9876"
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    # where the trace store (SQLite) lives
    console_data_dir: str = "~/.ferry/console"
    # spans older than this are deleted; so are the oldest ones above traceStoreMaxBytes
    trace_retention_hours: int = 72
    trace_store_max_bytes: int = 256 * MiB
    # one OTLP/HTTP export request, compressed or not (bigger ones get 413)
    otlp_max_request_bytes: int = 16 * MiB
    # bytes of a message body shown; the rest is cut
    body_preview_bytes: int = 4096
    # messages one query shows at most
    max_query_messages: int = 64
    # the charts: one sample every sampleIntervalMs, sampleSlots samples kept per series
    sample_interval_ms: int = 10_000
    sample_slots: int = 90
    # topics and groups sampled at most (the others are listed but not charted)
    max_sampled_topics: int = 64
    max_sampled_groups: int = 64
    # requests served at once; more get 503 at once
    max_concurrent_requests: int = 64
    # answers of the brokers and name servers the console waits for
    admin_timeout_ms: int = 3000
    # controller mode: the controller(s), host:port[;host:port]; empty: each broker group's
    # own controllerAddr, read from its brokers' config
    controller_addr: str = ""
    # the cluster's credentials for the console's background work (the sampler), when
    # authentication is on; else FERRY_ACCESS_KEY / FERRY_SECRET_KEY as the CLI takes them.
    # Pages never use them: with a login each session signs with its user's own.
    access_key: str = ""
    secret_key: str = ""
    # with tlsEnable: the cluster's server.key (CURVE public key); else FERRY_TLS_SERVER_KEY
    tls_server_key: str = ""
    # whether pages ask for a login: auto (when the console has credentials, or when the
    # cluster refuses an unsigned request with NoCredentials), true, or false
    auth_required: str = "auto"
    # a login lasts this long without use (and never more than sessionMaxHours)
    session_timeout_minutes: int = 30
    session_max_hours: int = 12
    # when set, /v1/traces takes only exports carrying "Authorization: Bearer <otlpToken>"
    # (services: OTEL_EXPORTER_OTLP_TRACES_HEADERS=Authorization=Bearer%20<otlpToken>)
    otlp_token: str = ""
    # logged-in sessions kept at once (each has its own clients); the oldest goes first
    max_sessions: int = 64

    def __repr__(self) -> str:  # the secret must reach no log line
        fields = msgspec.structs.asdict(self)
        for key in ("secret_key", "otlp_token"):
            if fields[key]:
                fields[key] = "***"
        return f"ConsoleConfig({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

    def credentials(self) -> Credentials | None:
        """The console's own credentials (config, else the CLI's variables); None: none."""
        access = self.access_key or os.environ.get(ACCESS_ENV, "")
        secret = self.secret_key or os.environ.get(SECRET_ENV, "")
        if not access and not secret:
            return None
        if not access or not secret:
            raise ConfigError(
                f"give both accessKey and secretKey (or {ACCESS_ENV} and {SECRET_ENV})"
            )
        return Credentials(access, secret)

    def server_key(self) -> str | None:
        return self.tls_server_key or os.environ.get(TLS_ENV) or None

    @property
    def data_dir(self) -> Path:
        return Path(os.path.expanduser(self.console_data_dir))

    def check(self) -> None:
        if not self.namesrv_addr:
            raise ConfigError("namesrvAddr is empty")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        if self.trace_retention_hours <= 0:
            raise ConfigError("traceRetentionHours must be more than 0")
        if self.trace_store_max_bytes < MiB:
            raise ConfigError("traceStoreMaxBytes must be at least 1 MiB")
        if not 1024 <= self.otlp_max_request_bytes <= 256 * MiB:
            raise ConfigError("otlpMaxRequestBytes must be within 1 KiB..256 MiB")
        if not 16 <= self.body_preview_bytes <= MiB:
            raise ConfigError("bodyPreviewBytes must be within 16..1048576")
        if not 1 <= self.max_query_messages <= 1000:
            raise ConfigError("maxQueryMessages must be within 1..1000")
        if self.sample_interval_ms < 100:
            raise ConfigError("sampleIntervalMs must be at least 100")
        if not 2 <= self.sample_slots <= 10_000:
            raise ConfigError("sampleSlots must be within 2..10000")
        if self.max_sampled_topics < 0 or self.max_sampled_groups < 0:
            raise ConfigError("maxSampledTopics and maxSampledGroups must not be negative")
        if self.max_concurrent_requests < 1:
            raise ConfigError("maxConcurrentRequests must be at least 1")
        if self.admin_timeout_ms < 100:
            raise ConfigError("adminTimeoutMs must be at least 100")
        if self.auth_required not in ("auto", "true", "false"):
            raise ConfigError(f"authRequired must be auto, true or false: {self.auth_required!r}")
        if self.session_timeout_minutes < 1 or self.session_max_hours < 1:
            raise ConfigError("sessionTimeoutMinutes and sessionMaxHours must be at least 1")
        if self.max_sessions < 1:
            raise ConfigError("maxSessions must be at least 1")
        self.credentials()
        if self.controller_addr:
            try:
                parse_controllers(self.controller_addr)
            except InvalidParameterError as err:
                raise ConfigError(f"controllerAddr: {err.message}") from err
