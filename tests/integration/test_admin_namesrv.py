"""mqadmin's name server commands through a pipe, against real name servers: getNamesrvConfig,
updateNamesrvConfig, updateKvConfig, deleteKvConfig, updateOrderConf."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from admin_pipe_support import admin_piped as piped
from admin_pipe_support import admin_run as run
from admin_pipe_support import lines_with
from itest_support import (
    Cluster,
    module_cluster,  # noqa: F401 - the cluster fixture
)

from ferry.runtime.launcher import ServiceProcess, service_args, start_service

pytestmark = pytest.mark.integration

# long names: a table that folds cells breaks them
TOPIC = "OrderedTopic_" + "of_the_north_warehouse_" * 3
NAMESPACE = "FERRY_TEST_" + "namespace_" * 4
KEY = "key-" + "x" * 60


def line_with(out: str, *values: str) -> str:
    return lines_with(out, *values)[0]


def test_namesrv_config_read_and_changed_live(cluster: Cluster) -> None:
    ns = cluster.namesrv
    out = piped(ns, "getNamesrvConfig")
    assert line_with(out, "scanNotActiveBrokerInterval", "5000").split()[-1] == "live"
    line_with(out, ns)  # which name server, whole
    done = piped(ns, "updateNamesrvConfig", "-k", "scanNotActiveBrokerInterval", "-v", "3000")
    line_with(done, ns)
    got = json.loads(piped(ns, "getNamesrvConfig", "--json"))
    assert got[ns]["scanNotActiveBrokerInterval"] == "3000"
    # a key read only at start-up, an unknown key, a bad value: refused, nothing changed
    for key, value in (
        ("listenPort", "1"),
        ("noSuchKey", "1"),
        ("scanNotActiveBrokerInterval", "0"),
    ):
        refused = run(ns, "updateNamesrvConfig", "-k", key, "-v", value)
        assert refused.returncode == 2, refused.stderr
        assert key in refused.stderr or "bad value" in refused.stderr
    assert "restart" in run(ns, "updateNamesrvConfig", "-k", "listenPort", "-v", "1").stderr
    got = json.loads(piped(ns, "getNamesrvConfig", "--json"))
    assert got[ns]["scanNotActiveBrokerInterval"] == "3000"
    assert run(ns, "updateNamesrvConfig", "-k", "x").returncode == 2  # no -v


def test_kv_config_put_get_delete(cluster: Cluster) -> None:
    ns = cluster.namesrv
    line_with(piped(ns, "updateKvConfig", "-s", NAMESPACE, "-k", KEY, "-v", "v1"), ns)
    out = piped(ns, "deleteKvConfig", "-s", NAMESPACE, "-k", KEY)
    line_with(out, ns, "deleted")
    assert line_with(piped(ns, "deleteKvConfig", "-s", NAMESPACE, "-k", KEY), ns).endswith(
        "had none"
    )
    bad = run(ns, "updateKvConfig", "-s", " ", "-k", KEY, "-v", "v")
    assert bad.returncode == 2 and "namespace is empty" in bad.stderr
    assert run(ns, "updateKvConfig", "-k", KEY, "-v", "v").returncode == 2  # no -s


def test_order_conf_put_get_delete_and_shown_in_the_route(cluster: Cluster) -> None:
    ns = cluster.namesrv
    piped(ns, "updateTopic", "-t", TOPIC, "-c", "DefaultCluster")
    conf = "broker-a:8"
    line_with(piped(ns, "updateOrderConf", "-k", TOPIC, "-m", "put", "-v", conf), ns, conf)
    line_with(piped(ns, "updateOrderConf", "-k", TOPIC, "-m", "get"), ns, conf)
    title = piped(ns, "topicRoute", "-t", TOPIC).splitlines()[0]
    assert TOPIC in title.split() and f"{conf})" in title.split()
    route = json.loads(piped(ns, "topicRoute", "-t", TOPIC, "--json"))
    assert route["order_topic_conf"] == conf
    piped(ns, "updateOrderConf", "-k", TOPIC, "-m", "delete")
    missing = run(ns, "updateOrderConf", "-k", TOPIC, "-m", "get")
    assert missing.returncode != 0 and TOPIC in missing.stderr
    assert "order_topic_conf" not in json.loads(piped(ns, "topicRoute", "-t", TOPIC, "--json"))
    for args in (("-m", "put"), ("-m", "put", "-v", "broker-a"), ("-m", "replace")):
        bad = run(ns, "updateOrderConf", "-k", TOPIC, *args)
        assert bad.returncode == 2, bad.stderr


def start_namesrv(kv_path: Path) -> ServiceProcess:
    return start_service(
        "namesrv", service_args(None, {"listenPort": "0", "kvConfigPath": str(kv_path)})
    )


def test_kv_config_kept_in_kv_config_path_over_a_restart(tmp_path: Path) -> None:
    kv_path = tmp_path / "namesrv" / "kvConfig.json"
    first = start_namesrv(kv_path)
    try:
        addr = first.endpoints["addr"]
        piped(addr, "updateKvConfig", "-s", NAMESPACE, "-k", KEY, "-v", "kept")
        piped(addr, "updateKvConfig", "-s", NAMESPACE, "-k", "gone", "-v", "x")
        piped(addr, "deleteKvConfig", "-s", NAMESPACE, "-k", "gone")
    finally:
        first.stop()
    saved = json.loads(kv_path.read_text())
    assert saved == {"configTable": {NAMESPACE: {KEY: "kept"}}}
    second = start_namesrv(kv_path)
    try:
        addr = second.endpoints["addr"]
        out = piped(addr, "deleteKvConfig", "-s", NAMESPACE, "-k", KEY, "--json")
        assert json.loads(out)["deleted"] == {addr: True}
    finally:
        second.stop()
