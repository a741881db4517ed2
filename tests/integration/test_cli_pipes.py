"""What people copy from `ferry admin` stays whole: through a pipe (`| grep <msgId>`), and on
a narrow terminal (a pseudo-terminal 40 columns wide); long work shows progress on a terminal
only. The real `ferry` command runs in a subprocess against a real cluster."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import termios
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from itest_support import FERRY, Cluster, start_cluster, wait_for

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer, SendResult
from ferry.runtime.launcher import start_broker_services, start_local_cluster

# long names: a table that folds cells to fit 80 columns breaks them
TOPIC = "PipeTopic_" + "orders_of_the_north_warehouse_" * 3
GROUP = "PipeGroup_" + "readers_of_the_north_warehouse_" * 2
KEY = "order-2026-11-26-000000000000000042"
BOX = ("│", "┃", "─", "━")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass
class Sent:
    cluster: Cluster
    results: list[SendResult]


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sent]:
    c = start_cluster(tmp_path_factory.mktemp("pipes"))
    try:
        with Producer("PipeProducer", c.namesrv) as producer:
            results = [
                producer.send(Message(TOPIC, f"body {i}\nsecond line".encode(), keys=[KEY]))
                for i in range(3)
            ]
        with PullConsumer(
            GROUP, c.namesrv, ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
        ) as consumer:
            consumer.subscribe(TOPIC)
            got: list[object] = []
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                got += consumer.poll(timeout=1.0)
            consumer.commit()
        yield Sent(c, results)
    finally:
        c.local.stop()


def piped(cluster: Cluster, *args: str) -> str:
    """`ferry admin <args> | cat`: stdout a pipe."""
    done = subprocess.run(
        [FERRY, "admin", *args, "-n", cluster.namesrv],
        capture_output=True,  # stdout a pipe, as `| grep` makes it
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def whole_on_a_line(out: str, *values: str) -> None:
    lines = out.splitlines()
    for value in values:
        assert any(value in line for line in lines), f"{value!r} not whole on a line of:\n{out}"


def test_piped_tables_are_plain_lines_with_every_copied_value_whole(sent: Sent) -> None:
    c = sent.cluster
    ids = [r.msg_id for r in sent.results]
    offset_ids = [r.offset_msg_id for r in sent.results]
    by_key = piped(c, "queryMsgByKey", "-t", TOPIC, "-k", KEY)
    whole_on_a_line(by_key, *ids, *offset_ids)
    for msg_id in ids:  # `| grep <msgId>` finds exactly its record, with its key
        found = [ln for ln in by_key.splitlines() if msg_id in ln]
        assert len(found) == 1 and KEY in found[0]
    assert "body 0\\nsecond line" in by_key  # a line break inside a body stays inside
    header = next(ln for ln in by_key.splitlines() if ln.startswith("#msg id"))
    assert "#offset msg id" in header
    by_id = piped(c, "queryMsgById", "-i", offset_ids[0])
    whole_on_a_line(by_id, ids[0], offset_ids[0], TOPIC, KEY)
    whole_on_a_line(piped(c, "queryMsgByUniqueKey", "-i", ids[1], "-t", TOPIC), ids[1], TOPIC)
    whole_on_a_line(piped(c, "printMsg", "-t", TOPIC), *ids, *offset_ids)
    whole_on_a_line(piped(c, "topicList"), TOPIC)
    whole_on_a_line(piped(c, "topicRoute", "-t", TOPIC), c.broker_addr, TOPIC)
    whole_on_a_line(piped(c, "topicStatus", "-t", TOPIC), TOPIC)
    whole_on_a_line(piped(c, "clusterList"), c.broker_addr, "DefaultCluster")
    whole_on_a_line(piped(c, "brokerStatus", "-b", c.broker_addr), c.broker_addr)
    whole_on_a_line(piped(c, "topicClusterList", "-t", TOPIC), TOPIC)
    progress = piped(c, "consumerProgress", "-g", GROUP, "-t", TOPIC)
    whole_on_a_line(progress, GROUP, TOPIC)
    for line in progress.splitlines()[2:]:  # one queue per line: topic, broker, queue, ...
        fields = line.split()
        assert fields[0] == TOPIC and fields[1] == "broker-a", line
    outputs = [by_key, by_id, progress, piped(c, "clusterList")]
    assert not any(box in out for out in outputs for box in BOX)


def test_consumer_progress_needs_neither_group_nor_topic(sent: Sent) -> None:
    c = sent.cluster
    rows = json.loads(piped(c, "consumerProgress", "-g", GROUP, "--json"))
    assert {r["topic"] for r in rows} == {TOPIC}  # every topic of the group, -t not needed
    committed = sum(r["consumer_offset"] for r in rows if isinstance(r["consumer_offset"], int))
    assert committed >= 2
    lag = sum(r["lag"] for r in rows if isinstance(r["lag"], int))
    never = sum(r["broker_offset"] for r in rows if r["consumer_offset"] == "-")
    assert committed + lag + never == 3
    groups = json.loads(piped(c, "consumerProgress", "--json"))
    mine = next(g for g in groups if g["group"] == GROUP)
    assert mine["topics"] == [TOPIC]
    assert mine["lag"] == lag
    table = piped(c, "consumerProgress")
    line = next(ln for ln in table.splitlines() if ln.startswith(GROUP))
    assert line.split()[-1] == str(lag)  # the group's total lag, last on its line
    unknown = subprocess.run(
        [FERRY, "admin", "consumerProgress", "-g", "NoSuchPipeGroup", "-n", c.namesrv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 3, unknown.stdout
    assert "NoSuchPipeGroup is unknown" in unknown.stderr


# ---- pseudo-terminals ----


def on_pty(
    cluster: Cluster, args: list[str], columns: int, *, stdout_tty: bool = True
) -> tuple[str, str]:
    """Runs `ferry admin <args>` with stderr on a pseudo-terminal `columns` wide, and stdout
    on it too (else a pipe); returns (stdout, what the terminal received)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen(
        [FERRY, "admin", *args, "-n", cluster.namesrv],
        stdout=slave if stdout_tty else subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other side closed: everything was read
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    out = ""
    if proc.stdout is not None:
        with proc.stdout:
            out = proc.stdout.read().decode()
    assert proc.wait(30) == 0, seen.decode(errors="replace")
    return out, ANSI.sub("", seen.decode(errors="replace")).replace("\r", "")


def test_a_40_column_terminal_never_breaks_ids_topics_or_addresses(sent: Sent) -> None:
    c = sent.cluster
    ids = [r.msg_id for r in sent.results]
    offset_ids = [r.offset_msg_id for r in sent.results]
    _, by_key = on_pty(c, ["queryMsgByKey", "-t", TOPIC, "-k", KEY], 40)
    whole_on_a_line(by_key, *ids, *offset_ids, KEY)
    _, by_id = on_pty(c, ["queryMsgById", "-i", offset_ids[0]], 40)
    whole_on_a_line(by_id, ids[0], offset_ids[0], TOPIC)
    _, route = on_pty(c, ["topicRoute", "-t", TOPIC], 40)
    whole_on_a_line(route, c.broker_addr, TOPIC)
    _, progress = on_pty(c, ["consumerProgress", "-g", GROUP], 40)
    whole_on_a_line(progress, GROUP, TOPIC)
    _, clusters = on_pty(c, ["clusterList"], 40)
    whole_on_a_line(clusters, c.broker_addr)
    # wide enough: a boxed table, ids still whole
    _, wide = on_pty(c, ["queryMsgByKey", "-t", TOPIC, "-k", KEY], 250)
    assert any(box in wide for box in BOX)
    whole_on_a_line(wide, *ids, *offset_ids)


def test_long_work_shows_progress_on_a_terminal_and_is_quiet_in_a_pipe(sent: Sent) -> None:
    c = sent.cluster
    for args in (
        ["printMsg", "-t", TOPIC],
        ["resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "0"],
    ):
        # stdout piped, stderr on a terminal: the terminal gets nothing but the result
        out, terminal = on_pty(c, args, 120, stdout_tty=False)
        assert terminal.strip() == "", terminal
        assert out.strip()
        quiet = subprocess.run(
            [FERRY, "admin", *args, "-n", c.namesrv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    _, shown = on_pty(c, ["printMsg", "-t", TOPIC], 120)
    assert "reading" in shown  # the progress line, drawn then cleared


def test_a_commit_past_the_max_offset_is_clamped_and_lag_is_never_negative(sent: Sent) -> None:
    c = sent.cluster
    with Admin(c.namesrv) as admin:
        queue = sent.results[0].queue
        top = admin.max_offset(queue)
        assert top >= 1
        admin.update_consumer_offset("PipeClamp", queue, top + 1000)
        assert admin.consumer_offset("PipeClamp", queue) == top  # RocketMQ's end of queue
        admin.update_consumer_offset("PipeClamp", queue, top - 1)  # within: kept as given
        assert admin.consumer_offset("PipeClamp", queue) == top - 1
        admin.update_consumer_offset("PipeClamp", queue, top + 5)
        rows = admin.consumer_progress("PipeClamp", TOPIC)
    assert all(r.lag is None or r.lag >= 0 for r in rows)
    mine = next(r for r in rows if r.queue == queue)
    assert (mine.consumer_offset, mine.lag) == (top, 0)
    # a queue the store never wrote to has max offset 0: a commit there is kept at 0
    with Admin(c.namesrv) as admin:
        empty = next(q for q in admin.queues(TOPIC) if admin.max_offset(q) == 0)
        admin.update_consumer_offset("PipeClamp", empty, 7)
        assert admin.consumer_offset("PipeClamp", empty) == 0
    progress = json.loads(piped(c, "consumerProgress", "-g", "PipeClamp", "--json"))
    assert progress and all(r["lag"] == "-" or r["lag"] >= 0 for r in progress)


def test_mqadmin_spellings_work(sent: Sent) -> None:
    c = sent.cluster
    to_queue = json.loads(
        piped(c, "sendMessage", "-t", TOPIC, "-p", "to 2", "-b", "broker-a", "-i", "2", "--json")
    )
    assert (to_queue["broker"], to_queue["queue_id"]) == ("broker-a", 2)
    read = json.loads(
        piped(
            c, "consumeMessage", "-t", TOPIC, "-b", "broker-a", "-i", "2", "--wait", "1", "--json"
        )
    )
    assert to_queue["msg_id"] in [m["msg_id"] for m in read]
    assert {m["queue_id"] for m in read} == {2}
    args = ["consumeMessage", "-t", TOPIC, "-g", "PipeLooker", "--wait", "1", "--json"]
    assert len(json.loads(piped(c, *args, "-s", "0", "-c", "3"))) == 3
    assert json.loads(piped(c, *args, "-e", "1")) == []  # nothing was stored by then
    keyed = json.loads(
        piped(c, "queryMsgByKey", "-t", TOPIC, "-k", KEY, "-b", "0", "-m", "2", "--json")
    )
    assert len(keyed) == 2
    with_bodies = piped(c, "printMsg", "-t", TOPIC, "-d", "true")  # mqadmin's -d takes a word
    assert with_bodies.count("# message ") >= 3  # one record per message, whole bodies
    without = piped(c, "printMsg", "-t", TOPIC, "-d", "false")
    assert "# message " not in without and sent.results[0].msg_id in without
    status = piped(c, "brokerStatus", "-c", "DefaultCluster")  # -b is optional, as there
    whole_on_a_line(status, f"# broker {c.broker_addr}")
    assert json.loads(piped(c, "clusterList", "--clusterName", "DefaultCluster", "--json"))
    whole_on_a_line(piped(c, "topicRoute", "-t", TOPIC, "-l"), c.broker_addr)
    models = json.loads(piped(c, "topicList", "-c", "--json"))
    mine = next(m for m in models if m["topic"] == TOPIC)
    assert mine["cluster"] == "DefaultCluster" and GROUP in mine["groups"]
    lines = [ln.split() for ln in piped(c, "topicList", "-c").splitlines()]
    assert ["DefaultCluster", TOPIC, GROUP] in lines  # one line per topic and group
    unique = ["queryMsgByUniqueKey", "-i", sent.results[0].msg_id, "-t", TOPIC, "-a", "true"]
    assert json.loads(piped(c, *unique, "--json"))["msg_id"] == sent.results[0].msg_id
    first = sent.results[0].queue
    by_queue = ["printMsgByQueue", "-t", TOPIC, "-a", first.broker_name, "-i", str(first.queue_id)]
    assert json.loads(piped(c, *by_queue, "-s", "NoSuchTag", "--json")) == []
    whole = piped(c, *by_queue, "-d", "true")
    assert f"# message {sent.results[0].msg_id}" in whole
    updated = piped(c, "updateBrokerConfig", "-k", "maxMessageSize", "-v", "4194304", "-a", "true")
    whole_on_a_line(updated, c.broker_addr)
    with PullConsumer("PipeMember", c.namesrv) as member:
        member.subscribe(TOPIC)
        member.poll(timeout=0.1)

        def members(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [FERRY, "admin", "consumerConnection", "-g", "PipeMember", *extra],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        def seen() -> bool:
            return members("-b", c.broker_addr, "-n", c.namesrv).returncode == 0

        wait_for(seen, timeout=20, what="PipeMember's heartbeat")
        elsewhere = members("-b", "127.0.0.1:1", "-n", c.namesrv)
        assert elsewhere.returncode == 3, elsewhere.stdout  # that broker knows no member
    piped(c, "updateSubGroup", "--groupName", "PipeDropped")
    with Admin(c.namesrv) as admin:
        assert "PipeDropped" in [g.group_name for g in admin.sub_groups(c.broker_addr)]
        piped(c, "deleteSubGroup", "-g", "PipeDropped", "-r", "true")  # -r takes a word there
        assert "PipeDropped" not in [g.group_name for g in admin.sub_groups(c.broker_addr)]


def test_reset_one_queue_to_an_offset_and_print_by_tag(sent: Sent) -> None:
    c = sent.cluster
    queue = sent.results[0].queue
    args = ["resetOffsetByTime", "-g", "PipeReset", "-t", TOPIC, "-b", queue.broker_name]
    done = json.loads(piped(c, *args, "-q", str(queue.queue_id), "-o", "1", "--json"))
    assert [(o["queue"], o["offset"]) for o in done["offsets"]] == [(queue.queue_id, 1)]
    with Admin(c.namesrv) as admin:
        assert admin.consumer_offset("PipeReset", queue) == 1
        past = admin.max_offset(queue) + 10
    refused = subprocess.run(
        [FERRY, "admin", *args, "-q", str(queue.queue_id), "-o", str(past), "-n", c.namesrv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr  # usage: outside the queue's offsets
    assert f"offset {past} is outside" in refused.stderr
    with Producer("PipeTagger", c.namesrv) as producer:
        tagged = producer.send(Message(TOPIC, b"tagged", tags="PipeTag"))
    only = piped(c, "printMsg", "-t", TOPIC, "-s", "PipeTag || Other")
    assert tagged.msg_id in only
    assert sent.results[0].msg_id not in only


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(
    sent: Sent, json_flag: list[str]
) -> None:
    """`ferry admin printMsg ... | head -1`: the reader is gone before the output comes."""
    proc = subprocess.Popen(
        [FERRY, "admin", "printMsg", "-t", TOPIC, *json_flag, "-n", sent.cluster.namesrv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `head` does once it has its line
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(60) == 0, err
    assert err == ""


def test_lag_is_never_negative_after_the_queue_lost_its_end(tmp_path: Path) -> None:
    """A committed offset can still pass the max offset when the store loses its last
    messages (a crash before the flush): here consumerOffset.json is edited while the broker
    is down. consumerProgress, the console's group page and the lag metric all say 0."""
    data = tmp_path / "lost-end"
    local = start_local_cluster(
        str(data),
        overrides={"metricsExporterType": "PROM", "metricsPromExporterPort": "0"},
        console_port=0,
    )
    try:
        with Admin(local.namesrv_addr) as admin:
            admin.create_topic("LostEnd", 1, 1)
        with Producer("LostEndProducer", local.namesrv_addr) as producer:
            for i in range(3):
                producer.send(Message("LostEnd", f"m{i}".encode()))
        with Admin(local.namesrv_addr) as admin:
            admin.update_consumer_offset("LostEndGroup", admin.queues("LostEnd")[0], 3)
        broker_port = int(local.broker_addr.rsplit(":", 1)[1])
        ha_port = local.ha_addr.rsplit(":", 1)[1]
        for name in ("broker-remoting", "ha-replicator", "checkback", "scheduler", "index"):
            sp = local.get(name)
            sp.stop()
            local.processes.remove(sp)
        store = local.get("broker-store")
        store.stop()
        local.processes.remove(store)
        offsets_file = data / "broker-a" / "config" / "consumerOffset.json"
        table = json.loads(offsets_file.read_text())
        table["offsetTable"]["LostEnd@LostEndGroup"] = {"0": 50}  # 47 past the end
        offsets_file.write_text(json.dumps(table))
        start_broker_services(
            local,
            str(data / "broker-a"),
            namesrv_addr=local.namesrv_addr,
            broker_port=broker_port,
            overrides={
                "metricsExporterType": "PROM",
                "metricsPromExporterPort": "0",
                "haListenPort": ha_port,
            },
        )
        with Admin(local.namesrv_addr) as admin:
            queue = admin.queues("LostEnd")[0]
            assert admin.consumer_offset("LostEndGroup", queue) == 50
            assert admin.max_offset(queue) == 3
        argv = [FERRY, "admin", "consumerProgress", "-g", "LostEndGroup", "--json"]
        cli = subprocess.run(
            [*argv, "-n", local.namesrv_addr],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        assert [r["lag"] for r in json.loads(cli.stdout)] == [0]
        url = f"{local.console_url}/group/LostEndGroup?topic=LostEnd"
        with urllib.request.urlopen(url, timeout=30) as resp:
            page = resp.read().decode()
        assert '<strong id="group-lag">0</strong>' in page
        assert "-47" not in page
        metrics = local.get("broker-remoting").endpoints["metrics"]

        def lag_sample() -> list[str]:
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as resp:
                text = resp.read().decode()
            return [
                ln
                for ln in text.splitlines()
                if ln.startswith("rocketmq_consumer_lag_messages{")
                and 'consumer_group="LostEndGroup"' in ln
            ]

        lines = wait_for(lag_sample, timeout=20, what="LostEndGroup's lag metric")
        assert all(float(ln.rsplit(" ", 1)[1]) == 0 for ln in lines), lines
    finally:
        local.stop()
