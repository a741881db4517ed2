"""mqadmin's name server commands: getNamesrvConfig, updateNamesrvConfig, updateKvConfig,
deleteKvConfig, updateOrderConf.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, Json, Namesrv, admin_session, app
from ferry.cli.output import not_found, print_json, print_table

Namespace = Annotated[str, typer.Option("-s", "--namespace", help="kv namespace")]
Key = Annotated[str, typer.Option("-k", "--key")]


@app.command("getNamesrvConfig")
def get_namesrv_config(namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False) -> None:
    """The config in force on every name server (-n); `live` marks the keys
    updateNamesrvConfig changes without a restart."""
    from ferry.admin import namesrv as admin_namesrv

    with admin_session(namesrv) as admin:
        replies = admin_namesrv.namesrv_config(admin)
    if json:
        print_json({a: r.config for a, r in replies.items()})
        return
    for addr, reply in sorted(replies.items()):
        live = set(reply.live_keys)
        rows = [(k, v, "live" if k in live else "") for k, v in sorted(reply.config.items())]
        print_table(f"config of name server {addr}", ["key", "value", "changes"], rows)


@app.command("updateNamesrvConfig")
def update_namesrv_config(
    key: Key,
    value: Annotated[str, typer.Option("-v", "--value")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Change a key on every running name server (-n) until it restarts. Keys read only at
    start-up are refused."""
    from ferry.admin import namesrv as admin_namesrv

    with admin_session(namesrv) as admin:
        done = admin_namesrv.update_namesrv_config(admin, {key: value})
    if json:
        print_json({"key": key, "value": value, "namesrvs": done})
        return
    print_table(f"{key}={value}", ["name server"], [(a,) for a in done])


@app.command("updateKvConfig")
def update_kv_config(
    namespace: Namespace,
    key: Key,
    value: Annotated[str, typer.Option("-v", "--value")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Put a key in a namespace of every name server's kv store (kept in kvConfigPath)."""
    from ferry.admin import namesrv as admin_namesrv

    with admin_session(namesrv) as admin:
        done = admin_namesrv.put_kv(admin, namespace, key, value)
    if json:
        print_json({"namespace": namespace, "key": key, "value": value, "namesrvs": done})
        return
    print_table(f"{namespace} / {key} = {value}", ["name server"], [(a,) for a in done])


@app.command("deleteKvConfig")
def delete_kv_config(
    namespace: Namespace, key: Key, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False
) -> None:
    """Delete a key from a namespace of every name server's kv store."""
    from ferry.admin import namesrv as admin_namesrv

    with admin_session(namesrv) as admin:
        done = admin_namesrv.delete_kv(admin, namespace, key)
    if json:
        print_json({"namespace": namespace, "key": key, "deleted": done})
        return
    rows = [(a, "deleted" if had else "had none") for a, had in done.items()]
    print_table(f"{namespace} / {key}", ["name server", "result"], rows)


@app.command("updateOrderConf")
def update_order_conf(
    topic: Annotated[str, typer.Option("-k", "--topic", help="topic")],
    value: Annotated[
        str | None, typer.Option("-v", "--orderConf", help='"broker-a:4;broker-b:4" (put)')
    ] = None,
    method: Annotated[str, typer.Option("-m", "--method", help="put, get or delete")] = "get",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Put, get or delete a topic's order config (the ORDER_TOPIC_CONFIG namespace of the
    name servers' kv store; topicRoute shows it)."""
    from ferry.admin import namesrv as admin_namesrv

    method = method.strip().lower()
    if method not in ("put", "get", "delete"):
        raise typer.BadParameter(f"-m must be put, get or delete, not {method!r}")
    if method == "put":
        if not value:
            raise typer.BadParameter("-m put needs -v brokerName:queueNums;...")
        from ferry.protocol.errors import InvalidParameterError

        try:
            admin_namesrv.check_order_conf(value)
        except InvalidParameterError as err:
            raise typer.BadParameter(err.message) from None
    ns = admin_namesrv.ORDER_TOPIC_CONFIG
    with admin_session(namesrv) as admin:
        if method == "put":
            put = admin_namesrv.put_kv(admin, ns, topic, value or "")
            done: dict[str, str | None] = dict.fromkeys(put, value)
        elif method == "delete":
            done = dict.fromkeys(admin_namesrv.delete_kv(admin, ns, topic))
        else:
            done = admin_namesrv.get_kv(admin, ns, topic)
            if all(v is None for v in done.values()):
                not_found(f"topic {topic} has no order config on any name server")
    if json:
        print_json({"topic": topic, "method": method, "order_conf": done})
        return
    rows = [(a, v if v is not None else "") for a, v in sorted(done.items())]
    title = {"put": "set", "get": "order config", "delete": "deleted"}[method]
    print_table(f"{title}: {topic}", ["name server", "order conf"], rows)
