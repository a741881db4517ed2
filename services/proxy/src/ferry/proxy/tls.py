"""tlsEnable on the gRPC door: the port serves TLS with an X.509 certificate and key in PEM
(tlsServerCertPath, tlsServerKeyPath), as RocketMQ's proxy does; clients trust its CA.

Ferry's own tlsEnable is CURVE on ZeroMQ, with key files that are not X.509: the proxy keeps
using those (tlsServerKeyFile) to reach the cluster, and needs the PEM pair for its clients.
No client certificate is asked for: who a client is, the request signatures say.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from ferry.protocol.errors import ConfigError

PEM_MARK = b"-----BEGIN "


def _read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the TLS {what} {path}: {exc.strerror}") from None
    if PEM_MARK not in data:
        raise ConfigError(f"the TLS {what} {path} is not PEM")
    return data


def server_credentials(cert_path: str, key_path: str) -> grpc.ServerCredentials:
    """The gRPC server credentials; ConfigError when a file is missing or not PEM."""
    cert = _read_pem(cert_path, "certificate (tlsServerCertPath)")
    key = _read_pem(key_path, "key (tlsServerKeyPath)")
    return grpc.ssl_server_credentials([(key, cert)])
