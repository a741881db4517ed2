"""The security keys every service reads from its config (RocketMQ 5.3's names).

With authenticationEnabled every request must be signed; the cluster's own services sign
theirs with innerClientAuthenticationCredentials, which every service of the cluster (name
servers, brokers, controllers) must be given alike. authorizationEnabled adds the users'
ACL checks on top (it needs authentication: an unproven user name proves nothing).
"""

from __future__ import annotations

import json

import msgspec

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import key_pair
from ferry.protocol.errors import ConfigError


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


SECURITY_KEYS = (
    "authenticationEnabled",
    "authorizationEnabled",
    "innerClientAuthenticationCredentials",
    "tlsEnable",
    "tlsServerKeyFile",
    "tlsInternalKeyFile",
)


class SecurityConfig(msgspec.Struct, rename=_camel, kw_only=True):
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    # {"accessKey": "...", "secretKey": "..."}: what the cluster's services sign with
    inner_client_authentication_credentials: str = ""
    # CURVE on every ZeroMQ socket of the cluster (`ferry keys generate` makes the files): the
    # cluster's server key pair, and the key pair its services connect to each other with
    tls_enable: bool = False
    tls_server_key_file: str = ""
    tls_internal_key_file: str = ""

    def check_security(self) -> None:
        if self.authorization_enabled and not self.authentication_enabled:
            raise ConfigError("authorizationEnabled=true needs authenticationEnabled=true")
        if self.authentication_enabled and not self.inner_client_authentication_credentials:
            raise ConfigError(
                "authenticationEnabled=true needs innerClientAuthenticationCredentials="
                '{"accessKey":"...","secretKey":"..."} (what the services sign with)'
            )
        self.inner_credentials()
        if self.tls_enable:
            if not self.tls_server_key_file or not self.tls_internal_key_file:
                raise ConfigError(
                    "tlsEnable=true needs tlsServerKeyFile and tlsInternalKeyFile "
                    "(the .key_secret files `ferry keys generate` makes)"
                )
            self.server_key_pair()
            self.internal_key_pair()

    def server_key_pair(self) -> tuple[bytes, bytes]:
        return key_pair(self.tls_server_key_file)

    def internal_key_pair(self) -> tuple[bytes, bytes]:
        return key_pair(self.tls_internal_key_file)

    def inner_credentials(self) -> Credentials | None:
        text = self.inner_client_authentication_credentials.strip()
        if not text:
            return None
        try:
            raw = json.loads(text)
            return Credentials(str(raw["accessKey"]), str(raw["secretKey"]))
        except (ValueError, TypeError, KeyError):
            raise ConfigError(
                "innerClientAuthenticationCredentials is not "
                '{"accessKey":"...","secretKey":"..."} with non-empty values'
            ) from None
