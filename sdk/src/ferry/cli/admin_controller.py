"""`ferry admin getSyncStateSet | getControllerMetaData | electMaster | cleanBrokerMetadata`:
the controller's commands (controller mode), and getBrokerEpoch (asked of the brokers), with
RocketMQ 5's flags. Registered on `ferry admin`'s app when imported, as admin_scheduler."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, Json, Namesrv, admin_session, app
from ferry.cli.credentials import client_options
from ferry.cli.output import die, print_json, print_table, show_time
from ferry.protocol.errors import FerryError

if TYPE_CHECKING:
    from ferry.admin import ControllerAdmin
    from ferry.protocol.messages import BrokerGroupState

DEFAULT_CONTROLLER = "127.0.0.1:9878"

ControllerAddr = Annotated[
    str,
    typer.Option(
        "-a",
        "--controllerAddress",
        envvar="FERRY_CONTROLLER_ADDR",
        metavar="HOST:PORT",
        help="controller(s), host:port;...",
    ),
]
ClusterName = Annotated[str, typer.Option("-c", "--clusterName", metavar="CLUSTER")]


@contextmanager
def controller_session(addr: str) -> Iterator[ControllerAdmin]:
    """A started ControllerAdmin; a FerryError inside ends the command with its exit code."""
    from ferry.admin import ControllerAdmin

    try:
        with ControllerAdmin(addr, **client_options()) as ctl:
            yield ctl
    except FerryError as err:
        die(err)


def _print_groups(groups: list[BrokerGroupState], json: bool) -> None:
    if json:
        import msgspec

        print_json(msgspec.to_builtins(groups))
        return
    for g in groups:
        print_table(
            f"{g.cluster}/{g.broker_name}",
            ["key", "value"],
            [
                ("master id", g.master_id),
                ("master address", g.master_addr),
                ("master epoch", g.epoch),
                ("sync state set", ",".join(map(str, g.sync_state_set))),
                ("sync state set epoch", g.sync_state_set_epoch),
                ("switching to", g.handover_to or ""),
                (
                    "epochs (epoch:start offset)",
                    " ".join(f"{e.epoch}:{e.start_offset}" for e in g.epochs),
                ),
            ],
            fields=True,
        )
        print_table(
            f"replicas of {g.broker_name}",
            [
                "id",
                "address",
                "alive",
                "in sync",
                "role",
                "max offset",
                "epoch",
                "registered (UTC)",
            ],
            [
                (
                    r.replica_id,
                    r.addr,
                    "yes" if r.alive else "no",
                    "yes" if r.in_sync else "no",
                    r.role,
                    r.max_offset,
                    r.epoch,
                    show_time(r.registered_ms),
                )
                for r in g.replicas
            ],
        )


@app.command("getSyncStateSet")
def get_sync_state_set(
    controller: ControllerAddr = DEFAULT_CONTROLLER,
    broker_names: Annotated[
        str | None, typer.Option("-b", "--brokerName", help="broker name(s), comma-separated")
    ] = None,
    cluster: Annotated[str | None, typer.Option("-c", "--clusterName")] = None,
    json: Json = False,
) -> None:
    """Each broker group's master, epoch, in-sync replicas and replicas (the controller's)."""
    names = [n.strip() for n in (broker_names or "").split(",") if n.strip()]
    with controller_session(controller) as ctl:
        groups = ctl.sync_state_set(names, cluster=cluster or "")
    _print_groups(groups, json)


@app.command("getControllerMetaData")
def get_controller_metadata(
    controller: ControllerAddr = DEFAULT_CONTROLLER, json: Json = False
) -> None:
    """The controller asked, every live controller, and the etcd they share."""
    with controller_session(controller) as ctl:
        meta = ctl.metadata()
    if json:
        import msgspec

        print_json(msgspec.to_builtins(meta))
        return
    print_table(
        f"controller {meta.addr}",
        ["key", "value"],
        [
            ("controllers", ";".join(meta.controllers)),
            ("etcd endpoints", ";".join(meta.etcd_endpoints)),
            ("etcd reachable", "yes" if meta.etcd_reachable else "no"),
            ("etcd version", meta.etcd_version),
            ("etcd leader", meta.etcd_leader),
            ("etcd members", " ".join(meta.etcd_members)),
            ("controllerHeartBeatTimeoutMills", meta.heartbeat_timeout_ms),
            ("enableElectUncleanMaster", str(meta.elect_unclean_master).lower()),
        ],
        fields=True,
    )


@app.command("electMaster")
def elect_master(
    cluster: ClusterName,
    broker_name: Annotated[str, typer.Option("-n", "--brokerName")],
    broker: Annotated[
        str,
        typer.Option("-b", "--brokerAddress", help="the replica to elect: its address (or id)"),
    ],
    controller: ControllerAddr = DEFAULT_CONTROLLER,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="return once a live master is fenced")
    ] = False,
    json: Json = False,
) -> None:
    """Make a replica master. A live master is fenced first and replaced once its write
    lease has run out (up to controllerHeartBeatTimeoutMills)."""
    by_id = broker.isdigit()  # a replica id, as RocketMQ 5.1's -b brokerId
    with controller_session(controller) as ctl:
        state = ctl.elect_master(
            cluster,
            broker_name,
            "" if by_id else broker,
            replica_id=int(broker) if by_id else 0,
            wait=not no_wait,
        )
    _print_groups([state], json)


@app.command("cleanBrokerMetadata")
def clean_broker_metadata(
    cluster: ClusterName,
    broker_name: Annotated[str, typer.Option("-b", "--brokerName")],
    controller: ControllerAddr = DEFAULT_CONTROLLER,
    ids: Annotated[
        str | None,
        typer.Option(
            "--brokerControllerIdsToClean",
            "-i",
            help="replica ids, comma-separated (none: the whole group)",
        ),
    ] = None,
    clean_living: Annotated[
        bool, typer.Option("--cleanLivingBroker", "-l", help="also replicas that are alive")
    ] = False,
    json: Json = False,
) -> None:
    """Forget replicas of a broker group on the controller (never its live master)."""
    try:
        replica_ids = [int(i) for i in (ids or "").replace(";", ",").split(",") if i.strip()]
    except ValueError:
        raise typer.BadParameter(f"not replica ids: {ids!r}") from None
    with controller_session(controller) as ctl:
        done = ctl.clean_broker_metadata(
            cluster, broker_name, replica_ids, clean_living=clean_living
        )
    if json:
        print_json({"cleaned": done.cleaned, "groupRemoved": done.group_removed})
        return
    print_table(
        f"{cluster}/{broker_name} cleaned",
        ["replica id"],
        [(i,) for i in done.cleaned],
    )


@app.command("getBrokerEpoch")
def get_broker_epoch(
    broker_name: Annotated[str, typer.Option("-b", "--brokerName", metavar="NAME")] = "",
    cluster: ClusterName = "",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Each replica's epoch file (controller mode): the epochs its log holds and where each
    began, of one broker group (-b), of a cluster's (-c), or of all."""
    with admin_session(namesrv) as admin:
        replies = [
            admin.broker_epoch(addr)
            for addr in admin.group_addrs(broker_name or None, cluster or None)
        ]
    if json:
        import msgspec

        print_json([msgspec.to_builtins(r) for r in replies])
        return
    print_table(
        "broker epochs",
        ["cluster", "broker", "replica", "role", "epoch", "start offset"],
        [
            (r.cluster, r.broker_name, r.broker_id, r.role, e.epoch, e.start_offset)
            for r in replies
            for e in (r.epochs or [])
        ],
    )
