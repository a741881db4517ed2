"""`ferry admin createUser | updateUser | deleteUser | getUser | listUser | createAcl |
updateAcl | deleteAcl | getAcl | listAcl`: ACL 2.0's commands with RocketMQ 5.3's flags, on
one broker (-b) or every master of a cluster (-c; every cluster without either). Registered
on `ferry admin`'s app when imported, as admin_scheduler.

Passwords are never printed, in tables or in --json (brokers do not send them). A password
given to createUser or updateUser travels sealed with the secret key of the credentials the
command runs with (FERRY_ACCESS_KEY / FERRY_SECRET_KEY or --access-key / --secret-key); without
credentials it travels in clear, which only a broker with authentication off accepts. A user
or ACL that does not exist ends the command with exit code 3, as other things not found do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, BrokerAddr, Cluster, Json, Namesrv, admin_session, app
from ferry.cli.output import not_found, print_json, print_table

if TYPE_CHECKING:
    from ferry.admin import Admin
    from ferry.protocol.messages import AclRecord, AuthUser

Username = Annotated[str, typer.Option("-u", "--username", metavar="NAME", help="user name")]
Subject = Annotated[
    str, typer.Option("-s", "--subject", metavar="User:NAME", help="the ACL's subject")
]
Resources = Annotated[
    str,
    typer.Option(
        "-r",
        "--resources",
        metavar="RESOURCES",
        help="Topic:NAME, Group:NAME, Cluster:NAME, NAME* prefixes, *; comma-separated",
    ),
]
Actions = Annotated[
    str,
    typer.Option(
        "-a",
        "--actions",
        metavar="ACTIONS",
        help="Pub, Sub, Create, Update, Delete, Get, List, All; comma-separated",
    ),
]
Decision = Annotated[str, typer.Option("-d", "--decision", metavar="Allow|Deny")]
SourceIps = Annotated[
    str | None,
    typer.Option(
        "-i",
        "--sourceIp",
        metavar="CIDRS",
        help="only from these addresses or CIDRs; comma-separated",
    ),
]


def _items(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


@contextmanager
def auth_session(namesrv: str) -> Iterator[Admin]:
    """admin_session, with a user or ACL that is not there reported as not found."""
    from ferry.protocol.errors import AclNotFoundError, UserNotFoundError

    with admin_session(namesrv) as admin:
        try:
            yield admin
        except (UserNotFoundError, AclNotFoundError) as err:
            not_found(str(err))


def _print_done(what: str, key: str, value: str, brokers: list[str], json: bool) -> None:
    if json:
        print_json({key: value, "brokers": brokers})
        return
    print_table(what, ["broker"], [(b,) for b in brokers])


def _print_users(by_broker: dict[str, list[AuthUser]], json: bool) -> None:
    if json:  # no password, here either
        print_json(
            [
                {
                    "broker": broker,
                    "username": u.username,
                    "userType": u.user_type,
                    "userStatus": u.user_status,
                }
                for broker, users in sorted(by_broker.items())
                for u in users
            ]
        )
        return
    print_table(
        "users",
        ["broker", "username", "type", "status"],
        [
            (broker, u.username, u.user_type, u.user_status)
            for broker, users in sorted(by_broker.items())
            for u in users
        ],
    )


def _print_acls(by_broker: dict[str, list[AclRecord]], json: bool) -> None:
    rows = [
        (broker, acl.subject, e.resource, ",".join(e.actions), ",".join(e.source_ips), e.decision)
        for broker, acls in sorted(by_broker.items())
        for acl in acls
        for e in acl.entries
    ]
    if json:
        keys = ("broker", "subject", "resource", "actions", "sourceIps", "decision")
        print_json(
            [
                dict(zip(keys, (b, s, r, a.split(","), i.split(",") if i else [], d), strict=True))
                for b, s, r, a, i, d in rows
            ]
        )
        return
    print_table(
        "ACLs", ["broker", "subject", "resource", "actions", "source ips", "decision"], rows
    )


# ---- users ----


@app.command("createUser")
def create_user(
    username: Username,
    password: Annotated[str, typer.Option("-p", "--password", metavar="PASSWORD")],
    user_type: Annotated[
        str, typer.Option("-t", "--userType", metavar="Super|Normal", help="Normal when not given")
    ] = "Normal",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Create a user (its password is the secret key its clients sign with; it is sent
    sealed with the secret key of the credentials this command runs with)."""
    with auth_session(namesrv) as admin:
        done = admin.create_user(username, password, user_type, cluster=cluster, broker_addr=broker)
    _print_done(f"user {username} created", "username", username, done, json)


@app.command("updateUser")
def update_user(
    username: Username,
    password: Annotated[str, typer.Option("-p", "--password", metavar="PASSWORD")] = "",
    user_type: Annotated[str, typer.Option("-t", "--userType", metavar="Super|Normal")] = "",
    user_status: Annotated[str, typer.Option("-s", "--userStatus", metavar="enable|disable")] = "",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Change a user's password, type or status (what is not given stays)."""
    if not (password or user_type or user_status):
        raise typer.BadParameter("give at least one of -p, -t, -s")
    with auth_session(namesrv) as admin:
        done = admin.update_user(
            username,
            password=password,
            user_type=user_type,
            user_status=user_status,
            cluster=cluster,
            broker_addr=broker,
        )
    _print_done(f"user {username} updated", "username", username, done, json)


@app.command("deleteUser")
def delete_user(
    username: Username,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Delete a user and its ACL."""
    with auth_session(namesrv) as admin:
        done = admin.delete_user(username, cluster=cluster, broker_addr=broker)
    _print_done(f"user {username} deleted", "username", username, done, json)


@app.command("getUser")
def get_user(
    username: Username,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """A user's type and status on each broker (never its password)."""
    with auth_session(namesrv) as admin:
        users = admin.get_user(username, cluster=cluster, broker_addr=broker)
    _print_users({addr: [u] for addr, u in users.items()}, json)


@app.command("listUser")
def list_user(
    filter: Annotated[
        str, typer.Option("-f", "--filter", metavar="TEXT", help="names containing it")
    ] = "",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Users of each broker (never their passwords)."""
    with auth_session(namesrv) as admin:
        users = admin.list_users(filter, cluster=cluster, broker_addr=broker)
    _print_users(users, json)


# ---- ACLs ----


def _acl_command(name: str, update: bool, doc: str) -> None:
    """createAcl and updateAcl: the same flags; the brokers merge both the same way."""

    def command(
        subject: Subject,
        resources: Resources,
        actions: Actions,
        decision: Decision,
        source_ips: SourceIps = None,
        namesrv: Namesrv = DEFAULT_NAMESRV,
        broker: BrokerAddr = None,
        cluster: Cluster = None,
        json: Json = False,
    ) -> None:
        with auth_session(namesrv) as admin:
            change = admin.update_acl if update else admin.create_acl
            done = change(
                subject,
                _items(resources),
                _items(actions),
                decision,
                _items(source_ips),
                cluster=cluster,
                broker_addr=broker,
            )
        _print_done(f"ACL of {subject} set", "subject", subject, done, json)

    command.__doc__ = doc
    app.command(name)(command)


_acl_command(
    "createAcl",
    False,
    "Allow or deny a user actions on resources (one entry per resource, replacing the entry "
    "the ACL had for it).",
)
_acl_command("updateAcl", True, "Replace the entries of the resources given in a user's ACL.")


@app.command("deleteAcl")
def delete_acl(
    subject: Subject,
    resources: Annotated[
        str | None,
        typer.Option("-r", "--resources", metavar="RESOURCES", help="none: the whole ACL"),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Delete entries of a user's ACL, or all of it."""
    with auth_session(namesrv) as admin:
        done = admin.delete_acl(subject, _items(resources), cluster=cluster, broker_addr=broker)
    _print_done(f"ACL of {subject} deleted", "subject", subject, done, json)


@app.command("getAcl")
def get_acl(
    subject: Subject,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """A user's ACL on each broker: one line per resource."""
    with auth_session(namesrv) as admin:
        acls = admin.get_acl(subject, cluster=cluster, broker_addr=broker)
    _print_acls({addr: [acl] for addr, acl in acls.items()}, json)


@app.command("listAcl")
def list_acl(
    subject: Annotated[
        str, typer.Option("-s", "--subject", metavar="TEXT", help="subjects containing it")
    ] = "",
    resource: Annotated[
        str, typer.Option("-r", "--resource", metavar="TEXT", help="resources containing it")
    ] = "",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """ACLs of each broker, one line per resource."""
    with auth_session(namesrv) as admin:
        acls = admin.list_acls(subject, resource, cluster=cluster, broker_addr=broker)
    _print_acls(acls, json)
