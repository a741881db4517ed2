"""Admin's ACL 2.0 commands (createUser ... listAcl, as RocketMQ 5.3's mqadmin): each goes to
one broker (broker_addr) or to every master of `cluster` (of every cluster when neither is
given), as the other metadata commands do. Slaves copy their master's users and ACLs.

with Admin("127.0.0.1:9876") as admin:
    admin.create_user("alice", "secret", "Normal", cluster="DefaultCluster")
    admin.create_acl("User:alice", ["Topic:orders"], ["Pub"], "Allow")

Changes return the brokers changed; reads return each broker's answer by address. Values
are checked by the brokers, which refuse bad ones with InvalidParameterError.

A new password never travels in clear: it is sealed (ferry.protocol.auth.seal) with the secret
key of the Admin's credentials, which the brokers know (the user's password, or the cluster's
inner key), and the request's clear `password` stays empty. An Admin without credentials has
no key: it sends the password in clear, which only a broker with authentication off takes.
So create users once authentication is on (the initial user, initAuthenticationUser, comes
from broker.conf), or over an encrypted connection (tlsEnable). getUser and listUser answer
without passwords.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from ferry.admin.locator import BrokerLocator
from ferry.protocol.auth import Credentials, seal
from ferry.protocol.messages import (
    AclPolicyEntry,
    AclRecord,
    AnyRequest,
    AuthAclListReply,
    AuthAclReply,
    AuthChangedReply,
    AuthCreateAclRequest,
    AuthCreateUserRequest,
    AuthDeleteAclRequest,
    AuthDeleteUserRequest,
    AuthGetAclRequest,
    AuthGetUserRequest,
    AuthListAclRequest,
    AuthListUserRequest,
    AuthUpdateAclRequest,
    AuthUpdateUserRequest,
    AuthUser,
    AuthUserListReply,
    AuthUserReply,
    Reply,
)

log = logging.getLogger("ferry.admin.auth")

R = TypeVar("R", bound=Reply)


class SealedPassword:
    """A password as a createUser or updateUser carries it: sealed with the credentials'
    secret key when there are some, else in clear (a broker with authentication off)."""

    def __init__(self, password: str, credentials: Credentials | None) -> None:
        if password and credentials is not None:
            self.clear = ""
            self.sealed = seal(credentials.secret_key, password.encode())
            self.sealed_by = credentials.access_key
        else:
            self.clear, self.sealed, self.sealed_by = password, b"", ""


class AuthAdmin(BrokerLocator):
    """The ACL commands of an Admin, sent with its BrokerLocator calls."""

    def _each_broker(
        self, body: AnyRequest, cls: type[R], cluster: str | None, broker_addr: str | None
    ) -> dict[str, R]:
        return self.each_target(body, cls, cluster, broker_addr)

    def _change(self, body: AnyRequest, cluster: str | None, broker_addr: str | None) -> list[str]:
        """The brokers changed. The change is in force on the name servers and controllers
        when this returns, except on those a broker names (logged as a WARNING: they get it
        at their next refresh, within seconds)."""
        replies = self._each_broker(body, AuthChangedReply, cluster, broker_addr)
        for addr, reply in replies.items():
            if reply.unconfirmed:
                log.warning(
                    "%s: broker %s changed (auth version %d), but %s had not taken it yet",
                    type(body).__name__,
                    addr,
                    reply.version,
                    ", ".join(reply.unconfirmed),
                )
        return list(replies)

    # ---- users ----

    def create_user(
        self,
        username: str,
        password: str,
        user_type: str = "Normal",
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """createUser: a Super or Normal user, enabled; its password is its secret key."""
        return self._change(
            self.create_user_request(username, password, user_type), cluster, broker_addr
        )

    def create_user_request(
        self, username: str, password: str, user_type: str = "Normal"
    ) -> AuthCreateUserRequest:
        """What create_user sends: the password sealed with the Admin's credentials."""
        p = SealedPassword(password, self.credentials)
        return AuthCreateUserRequest(AuthUser(username, p.clear, user_type), p.sealed, p.sealed_by)

    def update_user(
        self,
        username: str,
        *,
        password: str = "",
        user_type: str = "",
        user_status: str = "",
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """updateUser: what is given changes (user_status "enable" or "disable"); the new
        password is sealed as create_user's."""
        p = SealedPassword(password, self.credentials)
        body = AuthUpdateUserRequest(
            username,
            p.clear,
            user_type,
            user_status,
            password_sealed=p.sealed,
            sealed_by=p.sealed_by,
        )
        return self._change(body, cluster, broker_addr)

    def delete_user(
        self, username: str, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        """deleteUser: the user and its ACL."""
        return self._change(AuthDeleteUserRequest(username), cluster, broker_addr)

    def get_user(
        self, username: str, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, AuthUser]:
        """getUser, by broker (the password empty); UserNotFoundError (naming the broker)
        where it is not."""
        replies = self._each_broker(
            AuthGetUserRequest(username), AuthUserReply, cluster, broker_addr
        )
        return {addr: reply.user for addr, reply in replies.items()}

    def list_users(
        self, filter: str = "", *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, list[AuthUser]]:
        """listUser, by broker: the users whose name contains `filter` (passwords empty)."""
        body = AuthListUserRequest(filter)
        replies = self._each_broker(body, AuthUserListReply, cluster, broker_addr)
        return {addr: list(reply.users) for addr, reply in replies.items()}

    # ---- ACLs ----

    def create_acl(
        self,
        subject: str,
        resources: list[str],
        actions: list[str],
        decision: str,
        source_ips: list[str] | None = None,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """createAcl: for each resource, an entry of the subject's ACL (replacing the one it
        had for that resource) with these actions, decision and source addresses."""
        body = AuthCreateAclRequest(_acl(subject, resources, actions, decision, source_ips))
        return self._change(body, cluster, broker_addr)

    def update_acl(
        self,
        subject: str,
        resources: list[str],
        actions: list[str],
        decision: str,
        source_ips: list[str] | None = None,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """updateAcl: as create_acl (the entries of the resources given are replaced)."""
        body = AuthUpdateAclRequest(_acl(subject, resources, actions, decision, source_ips))
        return self._change(body, cluster, broker_addr)

    def delete_acl(
        self,
        subject: str,
        resources: list[str] | None = None,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """deleteAcl: the entries of `resources`, or the subject's whole ACL."""
        body = AuthDeleteAclRequest(subject, list(resources or []))
        return self._change(body, cluster, broker_addr)

    def get_acl(
        self, subject: str, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, AclRecord]:
        """getAcl, by broker; AclNotFoundError where the subject has none."""
        replies = self._each_broker(AuthGetAclRequest(subject), AuthAclReply, cluster, broker_addr)
        return {addr: reply.acl for addr, reply in replies.items()}

    def list_acls(
        self,
        subject_filter: str = "",
        resource_filter: str = "",
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> dict[str, list[AclRecord]]:
        """listAcl, by broker: ACLs whose subject contains subject_filter, with their entries
        whose resource contains resource_filter."""
        body = AuthListAclRequest(subject_filter, resource_filter)
        replies = self._each_broker(body, AuthAclListReply, cluster, broker_addr)
        return {addr: list(reply.acls) for addr, reply in replies.items()}


def _acl(
    subject: str,
    resources: list[str],
    actions: list[str],
    decision: str,
    source_ips: list[str] | None,
) -> AclRecord:
    entries = [
        AclPolicyEntry(
            resource=resource,
            actions=list(actions),
            source_ips=list(source_ips or []),
            decision=decision,
        )
        for resource in resources
    ]
    return AclRecord(subject, entries)
