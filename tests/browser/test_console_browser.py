"""The console in a real browser against a real cluster: every page shows the messages sent
(one traced, one delayed, one retried into the DLQ), its forms create a topic, resend a dead
letter and reset offsets, and spans exported by the OpenTelemetry SDK show on the message's
trace page; a controller-mode group (etcd, the controller, three `ferry serve broker` trees)
shows its master, epoch and in-sync set on the cluster page, before and after a failover.
Screenshots go to test-artifacts/console/.

The browser is Debian's chromium with its chromedriver (`make deps` installs both); nothing is
downloaded. Where they are missing the tests fail in CI and skip elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from failover_support import ControlledGroup, group_state, start_group
from itest_support import SMALL_STORE, wait_for
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, NoOpTracerProvider, SpanKind
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferry.console.web import fmt_bytes
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import BrokerGroupState
from ferry.runtime.launcher import LocalCluster, ServiceProcess, start_local_cluster, start_service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC = "ConsoleTopic"
GROUP = "ConsoleGroup"
APP = "console-test-app"
FAST_LEVELS = " ".join(["1s"] * 18)  # retries and delays of one second


# ---- headless Chromium (Debian's chromium + chromium-driver), never downloaded ----

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "console"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> tuple[str, str] | None:
    driver = shutil.which("chromedriver")
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    return (browser, driver) if browser and driver else None


def start_browser() -> webdriver.Chrome:
    found = find_browser()
    if found is None:
        message = "chromium and chromedriver are not installed: run `make deps`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    browser, driver = found
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def text(driver: webdriver.Chrome) -> str:
    """The page's text; "" while a navigation replaces the page under the lookup."""
    try:
        return str(driver.find_element(By.TAG_NAME, "body").text)
    except NoSuchElementException:
        return ""
    except WebDriverException as exc:
        if replaced_mid_read(exc):
            return ""
        raise


def open_until(
    driver: webdriver.Chrome,
    url: str,
    check: Callable[[str], Any],
    timeout: float = 60.0,
    what: str = "",
) -> str:
    """Loads url until check(page text) holds (the console samples and receives spans
    asynchronously); fails at the deadline with the last page text."""
    deadline = time.monotonic() + timeout
    while True:
        driver.get(url)
        body = text(driver)
        if check(body):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or url}:\n{body[:3000]}")
        time.sleep(0.3)  # wait-ok: reload interval of a deadline-bounded wait


def replaced_mid_read(exc: WebDriverException) -> bool:
    """Whether a read failed because the page it read from was being replaced. Chrome says
    so either as a stale element or, when the swap lands inside the read itself, as an
    inspector error about a node that no longer belongs to the document."""
    if isinstance(exc, StaleElementReferenceException):
        return True
    return "does not belong to the document" in (exc.msg or "")


def element_text(driver: webdriver.Chrome, element_id: str) -> str:
    """The text of an element, "" while the page holding it is not there (yet)."""
    try:
        found = driver.find_elements(By.ID, element_id)
        return str(found[0].text) if found else ""
    except WebDriverException as exc:
        if replaced_mid_read(exc):
            return ""
        raise


def wait_element(driver: webdriver.Chrome, element_id: str, want: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while want not in element_text(driver, element_id):
        if time.monotonic() > deadline:
            pytest.fail(f"#{element_id} never showed {want!r}:\n{text(driver)[:3000]}")
        time.sleep(0.1)  # wait-ok: polling interval of a deadline-bounded wait


def wait_for_page(driver: webdriver.Chrome, check: Callable[[], bool], timeout: float = 30) -> None:
    """Waits until check() holds on the page the browser shows (a submitted form's answer
    loads after click() returns); fails at the deadline with the page text."""
    deadline = time.monotonic() + timeout

    def holds() -> bool:
        try:
            return check()
        except WebDriverException as exc:
            if replaced_mid_read(exc):
                return False
            raise

    while not holds():
        if time.monotonic() > deadline:
            pytest.fail(f"the page never showed what was expected:\n{text(driver)[:3000]}")
        time.sleep(0.1)  # wait-ok: polling interval of a deadline-bounded wait


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(int(height) + 100, 600), 4000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path


@dataclass
class Sent:
    traced: str = ""
    delayed: str = ""
    doomed: str = ""
    received: list[MessageExt] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Console:
    cluster: LocalCluster
    url: str
    provider: TracerProvider

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    env = {**os.environ, "FERRY_sampleIntervalMs": "500"}
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]  # the launcher points the services at the console
    cluster = start_local_cluster(
        str(tmp_path_factory.mktemp("console")),
        overrides={**SMALL_STORE, "messageDelayLevel": FAST_LEVELS},
        env=env,
        console_port=0,
    )
    provider = TracerProvider(resource=Resource.create({"service.name": APP}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{cluster.console_url}/v1/traces"),
            schedule_delay_millis=100,
        )
    )
    try:
        yield Console(cluster, cluster.console_url, provider)
    finally:
        provider.shutdown()
        cluster.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


def submit(driver: webdriver.Chrome, form_id: str, **fields: str) -> None:
    form = driver.find_element(By.ID, form_id)
    for name, value in fields.items():
        box = form.find_element(By.NAME, name)
        if box.tag_name == "select":
            box.find_element(By.CSS_SELECTOR, f"option[value='{value}']").click()
        else:
            box.clear()
            box.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def send_and_consume(c: Console) -> tuple[Sent, PushConsumer]:
    """A traced message, a delayed one, and one the listener fails until it lands in the DLQ;
    the consumer is left running (a live member), the caller shuts it down."""
    sent = Sent()

    def listen(msgs: list[MessageExt]) -> ConsumeResult:
        with sent.lock:
            sent.received.extend(msgs)
        return ConsumeResult.RECONSUME_LATER if msgs[0].body == b"doomed" else ConsumeResult.SUCCESS

    consumer = PushConsumer(
        GROUP,
        c.namesrv,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=1,
        tracer_provider=c.provider,
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(listen)
    consumer.start()
    with Producer("ConsoleProducers", c.namesrv, tracer_provider=c.provider) as producer:
        sent.traced = producer.send(
            Message(TOPIC, b"traced hello", tags="T", keys="traced-key")
        ).msg_id
        sent.delayed = producer.send(
            Message(TOPIC, b"delayed hello", keys="delayed-key", delay_level=2)
        ).msg_id
        sent.doomed = producer.send(Message(TOPIC, b"doomed", keys="dlq-key")).msg_id

        def bodies() -> set[bytes]:
            with sent.lock:
                return {m.body for m in sent.received}

        wait_for(lambda: {b"traced hello", b"delayed hello"} <= bodies(), 60, "deliveries")
        with Admin(c.namesrv) as admin:

            def dead_letters() -> int:
                try:
                    stats = admin.topic_stats(f"%DLQ%{GROUP}")
                except FerryError:
                    return 0
                return sum(q.max_offset - q.min_offset for qs in stats.values() for q in qs)

            wait_for(lambda: dead_letters() == 1, 60, "the doomed message in the DLQ")
        c.provider.force_flush()
    return sent, consumer


def test_console_pages_show_the_cluster_and_its_messages(
    console: Console, browser: webdriver.Chrome
) -> None:
    url = console.url
    # cluster: the broker group, its master and version
    page = open_until(browser, url + "/", lambda t: "broker-a" in t)
    assert "DefaultCluster" in page and "master (ASYNC_MASTER)" in page
    assert console.namesrv in page

    # topics: create one through the form
    browser.get(url + "/topics")
    submit(browser, "topic-form", topic=TOPIC, read="4", write="4", perm="6")
    wait_element(browser, "topic-name", TOPIC)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 4

    sent, consumer = send_and_consume(console)
    try:
        check_pages(console, browser, sent)
        check_dashboard_views(console, browser)
    finally:
        consumer.shutdown()

    # offsets reset by time, once the group is gone: the whole topic is lag again
    browser.get(f"{url}/group/{GROUP}?topic={TOPIC}")
    rows = "#reset-offsets tbody tr"
    submit(browser, "reset-form", topic=TOPIC, time="1970-01-01 00:00:00")
    # the click returns before the answer page has loaded: wait for it
    wait_for_page(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 4)
    browser.get(f"{url}/group/{GROUP}?topic={TOPIC}")
    assert int(browser.find_element(By.ID, "group-lag").text) >= 3

    # update the topic's permission through the form
    browser.get(f"{url}/topic/{TOPIC}")
    submit(browser, "topic-form", perm="4")
    # the old page shows the route too: wait until the answer shows the new permission
    wait_for_page(browser, lambda: element_text(browser, "route").split()[-1:] == ["4"])
    # the topic list says so: read-only
    open_until(
        browser,
        url + "/topics",
        lambda _t: topic_cells(browser, TOPIC).get("status") == "read-only",
        what="the topic read-only on the list",
    )
    assert topic_cells(browser, TOPIC)["perm"] == "R"


def check_pages(console: Console, browser: webdriver.Chrome, sent: Sent) -> None:
    url = console.url
    # cluster: messages in and out counted, TPS charted
    page = open_until(browser, url + "/", lambda t: "broker-a" in t)
    row = browser.find_element(By.CSS_SELECTOR, "#brokers tbody tr").text
    assert "0.1.0" in row
    assert "<polyline" in browser.page_source
    screenshot(browser, "cluster")

    page = open_until(
        browser, f"{url}/topic/{TOPIC}", lambda t: "3 messages stored" in t, what="3 stored"
    )
    assert GROUP in browser.find_element(By.ID, "topic-groups").text
    screenshot(browser, "topic")
    page = open_until(browser, url + "/topics", lambda t: TOPIC in t)

    # consumer groups: found by the sampler, lag and members on the group page
    open_until(browser, url + "/groups", lambda t: GROUP in t, what="the group sampled")
    screenshot(browser, "groups")
    browser.find_element(By.LINK_TEXT, GROUP).click()
    wait_for_page(browser, lambda: browser.current_url.endswith(f"/group/{GROUP}"))
    page = open_until(  # the member commits its offsets every few seconds
        browser,
        browser.current_url,
        lambda _t: element_text(browser, "group-lag") == "0",
        what="lag 0 once the member committed",
    )
    assert "ConsoleTopic" in page and "broker-a" in page
    (member,) = browser.find_elements(By.CSS_SELECTOR, "#members li")
    assert "@" in member.text  # a client id, ip@pid@...
    owners = [
        r.text.split()[-1] for r in browser.find_elements(By.CSS_SELECTOR, "#progress-2 tbody tr")
    ]
    assert owners == [member.text] * 4  # the one member owns every queue
    assert "<polyline" in browser.page_source or "waiting for samples" in page
    screenshot(browser, "group")

    # messages: by topic and time, by key, by id
    page = open_until(
        browser,
        f"{url}/messages?mode=time&topic={TOPIC}&begin=0",
        lambda t: "doomed" in t and "delayed hello" in t and "traced hello" in t,
    )
    screenshot(browser, "messages")
    browser.get(f"{url}/messages?mode=key&topic={TOPIC}&key=traced-key&begin=0")
    assert browser.find_element(By.ID, "result-count").text.startswith("1 message")
    browser.get(f"{url}/messages?mode=id&topic={TOPIC}&id={sent.traced}")
    assert "traced hello" in text(browser)
    browser.find_element(By.LINK_TEXT, sent.traced).click()
    wait_for_page(browser, lambda: element_text(browser, "body") == "traced hello")
    assert "traceparent" in browser.find_element(By.ID, "properties").text
    screenshot(browser, "message")

    # DLQ: the dead letter, browsed, then resent to its origin topic
    page = open_until(browser, url + "/dlq", lambda t: f"%DLQ%{GROUP}" in t)
    row = browser.find_element(By.CSS_SELECTOR, "#dlq tbody tr").text
    assert row.split()[2] == "1"
    screenshot(browser, "dlq")
    browser.find_element(By.LINK_TEXT, "browse").click()
    wait_for_page(browser, lambda: "doomed" in text(browser))
    browser.find_element(By.CSS_SELECTOR, "a.msg-link").click()
    wait_for_page(browser, lambda: bool(browser.find_elements(By.ID, "resend-form")))
    assert browser.find_element(By.NAME, "topic").get_attribute("value") == TOPIC
    submit(browser, "resend-form")
    wait_element(browser, "resent", f"Resent to {TOPIC}")
    screenshot(browser, "resent")

    # trace: the traced message's path, across its send trace and the consumer's trace
    open_until(
        browser,
        f"{url}/trace/message/{sent.traced}?topic={TOPIC}",
        lambda t: f"process {TOPIC}" in t and "ferry-broker-store" in t,
        what="the traced message's spans",
    )
    services = browser.find_element(By.ID, "trace-services").text
    assert APP in services and "ferry-broker-remoting" in services
    send_rows = [
        r
        for r in browser.find_elements(By.CSS_SELECTOR, ".span-row")
        if APP in r.text and f"send {TOPIC}" in r.text
    ]
    assert send_rows, "the producer's send span is shown"
    send_id = send_rows[0].get_attribute("id")
    links = browser.find_elements(By.CSS_SELECTOR, "a.span-link")
    assert any(str(a.get_attribute("href")).endswith(f"#{send_id}") for a in links)
    screenshot(browser, "trace")


def cells(row: Any) -> dict[str, str]:
    """A table row's cells by their class (the column)."""
    out: dict[str, str] = {}
    for cell in row.find_elements(By.CSS_SELECTOR, "td[class]"):
        for name in str(cell.get_attribute("class")).split():
            out[name] = str(cell.text)
    return out


def row_cells(driver: webdriver.Chrome, table: str, attr: str, value: str) -> dict[str, str]:
    """The cells of the row of `table` whose data-`attr` is value; {} while it is not there."""
    try:
        rows = driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr[data-{attr}]")
        row = next((r for r in rows if r.get_attribute(f"data-{attr}") == value), None)
        return cells(row) if row is not None else {}
    except WebDriverException as exc:
        if replaced_mid_read(exc):
            return {}
        raise


def topic_cells(driver: webdriver.Chrome, topic: str) -> dict[str, str]:
    return row_cells(driver, "topics", "topic", topic)


def check_dashboard_views(c: Console, browser: webdriver.Chrome) -> None:
    """What rocketmq-dashboard users look for: per broker uptime, CommitLog and disk; topics
    with queues, perm, status and message totals; groups with clients and consume TPS; the
    producers. Values are checked against what the cluster itself says."""
    url = c.url
    with Admin(c.namesrv) as admin:
        rt = admin.broker_runtime_info(c.cluster.broker_addr)
    browser.get(url + "/")
    broker = cells(browser.find_element(By.CSS_SELECTOR, "#brokers tbody tr"))
    assert re.fullmatch(r"\d+[dhms]( \d+[dhms])?", broker["uptime"]), broker["uptime"]
    held = int(rt["commitLogMaxOffset"]) - int(rt["commitLogMinOffset"])
    with Admin(c.namesrv) as admin:  # the log may grow meanwhile (the scheduler's own writes)
        after = admin.broker_runtime_info(c.cluster.broker_addr)
    held_after = int(after["commitLogMaxOffset"]) - int(after["commitLogMinOffset"])
    assert held > 0 and broker["commitlog"] in {fmt_bytes(held), fmt_bytes(held_after)}
    shown = float(broker["disk-used"].removesuffix(" %"))  # the disk is shared: it moves a bit
    assert abs(shown - float(rt["commitLogDiskRatio"]) * 100) < 1 and 0 < shown < 100
    total = fmt_bytes(int(rt["commitLogDiskTotalBytes"]))
    assert broker["disk-free"].endswith(f" of {total}")
    screenshot(browser, "cluster-usage")

    # topics: route, queues, perm, status and the 4 messages stored (3 sent, 1 resent)
    open_until(
        browser,
        url + "/topics",
        lambda _t: topic_cells(browser, TOPIC).get("messages") == "4",
        what="the topic's stored messages on the list",
    )
    row = topic_cells(browser, TOPIC)
    assert (row["brokers"], row["read-queues"], row["write-queues"]) == ("broker-a", "4", "4")
    assert (row["perm"], row["status"]) == ("RW", "ok")
    # the dead letter, and its resent copy that failed again (counted live: not sampled)
    open_until(
        browser,
        url + "/topics?show=dlq",
        lambda _t: topic_cells(browser, f"%DLQ%{GROUP}").get("messages") == "2",
        what="both dead letters counted",
    )
    screenshot(browser, "topics")

    # groups: the running member, push and clustering, messages pulled per second
    open_until(
        browser,
        url + "/groups",
        lambda _t: row_cells(browser, "groups", "group", GROUP).get("clients") == "1",
        what="the group's live member on the list",
    )
    group = row_cells(browser, "groups", "group", GROUP)
    assert (group["consume-type"], group["model"]) == ("PUSH", "CLUSTERING")
    assert float(group["tps"]) > 0  # its pulls are within the brokers' last minute
    screenshot(browser, "groups-dashboard")

    # producers: a live producer group, then its producer
    with Producer("ConsoleLiveProducers", c.namesrv, tracer_provider=NoOpTracerProvider()) as live:
        sent = live.send_batch([Message(TOPIC, f"untraced {i}".encode()) for i in range(3)])
        open_until(
            browser,
            url + "/producers",
            lambda _t: (
                row_cells(browser, "producer-groups", "group", "ConsoleLiveProducers").get("count")
                == "1"
            ),
            what="the live producer group",
        )
        browser.find_element(By.LINK_TEXT, "ConsoleLiveProducers").click()
        wait_element(browser, "producer-group", "ConsoleLiveProducers")
        (producer,) = browser.find_elements(By.CSS_SELECTOR, "#producers tbody tr")
        assert cells(producer)["client-id"] == live.client_id
        assert cells(producer)["brokers"] == "broker-a" and "PYTHON" in producer.text
        screenshot(browser, "producers")
    # a message of a batch from a producer that traces nothing: the broker's spans, by its id
    open_until(
        browser,
        f"{url}/trace/message/{sent.msg_ids[1]}",
        lambda t: f"send {TOPIC}" in t and "ferry-broker-store" in t,
        what="the broker's spans of an untraced batch message",
    )
    assert "ferry-broker-remoting" in browser.find_element(By.ID, "trace-services").text


def test_spans_from_the_sdk_exporter_show_on_the_message_trace_page(
    console: Console, browser: webdriver.Chrome
) -> None:
    msg_id = f"OTLP-{time.time_ns():x}"
    tracer = console.provider.get_tracer("console-test")
    with (
        tracer.start_as_current_span(
            "send Orders", kind=SpanKind.PRODUCER, attributes={"messaging.message.id": msg_id}
        ) as send,
        tracer.start_as_current_span("store Orders"),
    ):
        pass
    receive = tracer.start_span(
        "receive Orders", kind=SpanKind.CLIENT, links=[Link(send.get_span_context())]
    )
    receive.end()
    assert console.provider.force_flush()
    page = open_until(
        browser,
        f"{console.url}/traces?msg_id={urllib.parse.quote(msg_id)}",
        lambda t: "receive Orders" in t,
        what="the exported spans",
    )
    assert "3 spans in 2 traces" in page
    assert "send Orders" in page and "store Orders" in page
    send_id = f"span-{send.get_span_context().span_id:016x}"
    link = browser.find_element(By.CSS_SELECTOR, "a.span-link")
    assert str(link.get_attribute("href")).endswith(f"#{send_id}")
    screenshot(browser, "otlp-trace")
    browser.get(console.url + "/traces")
    assert "receive Orders" in text(browser)  # a root of its own in the recent traces


def test_bad_queries_get_error_pages_and_the_console_stays_up(
    console: Console, browser: webdriver.Chrome
) -> None:
    cases = {
        "/topic/no%20such": "400",
        "/topic/NoSuchTopic": "404",
        "/messages?mode=time&topic=ConsoleTopic&begin=yesterday": "400",
        "/messages?mode=nope": "400",
        "/message/XYZ": "400",
        "/trace/notahexid": "400",
        "/group/" + "g" * 300: "400",
    }
    for path, code in cases.items():
        browser.get(console.url + path)
        assert browser.find_element(By.CSS_SELECTOR, "h1.error-title").text.startswith(code), path
    screenshot(browser, "error")
    browser.get(console.url + "/")
    assert "broker-a" in text(browser)


# ---- controller mode (issue 26) ----


def shown(driver: webdriver.Chrome, state: BrokerGroupState) -> bool:
    """The page's broker-a row says what the controller holds."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#controller-groups tr[data-group='broker-a']")
    if not rows:
        return False
    row = rows[0]
    master = row.find_element(By.CSS_SELECTOR, "td.master").text
    epoch = row.find_element(By.CSS_SELECTOR, "td.epoch").text
    in_sync = row.find_element(By.CSS_SELECTOR, "td.sync-state-set").text
    members = ", ".join(str(i) for i in state.sync_state_set)
    return (
        master == f"replica {state.master_id} at {state.master_addr}"
        and epoch == f"epoch {state.epoch}"
        and in_sync.startswith(members + " ")
    )


def replica_cells(driver: webdriver.Chrome, replica_id: int) -> list[str]:
    """id, address, role, alive, log end, in sync of a replica's row."""
    rows = driver.find_elements(
        By.CSS_SELECTOR, f"#controller-groups tr[data-replica='{replica_id}']"
    )
    return [str(td.text) for td in rows[0].find_elements(By.TAG_NAME, "td")] if rows else []


@pytest.fixture
def controlled(tmp_path: Path) -> Iterator[tuple[ControlledGroup, list[ServiceProcess]]]:
    """The group, a console that finds its controller from the brokers' config, and one told
    where it is (controllerAddr)."""
    group = start_group(tmp_path)
    consoles: list[ServiceProcess] = []
    try:
        for i, told in enumerate(([], ["--set", f"controllerAddr={group.controller_addr}"])):
            args = ["--namesrv", group.namesrv_addr, "--port", "0", *told]
            consoles.append(
                start_service("console", [*args, "--data-dir", str(tmp_path / f"console-{i}")])
            )
        yield group, consoles
    finally:
        for console in consoles:
            console.stop()
        group.close()


def test_the_cluster_page_shows_each_groups_master_epoch_and_in_sync_set(
    controlled: tuple[ControlledGroup, list[ServiceProcess]], browser: webdriver.Chrome
) -> None:
    """Controller mode: the group's master (replica id and address), epoch and in-sync set
    as the controller holds them, found from the brokers' controllerAddr (or the console's own
    key); after the master's tree is killed, the new master, the higher epoch and the smaller
    set."""
    group, consoles = controlled
    url, told_url = (c.endpoints["url"] + "/" for c in consoles)
    driver = browser
    master = group.master(60)
    wait_for(
        lambda: (s := group_state(group)) is not None and len(s.sync_state_set) == 3,
        60,
        "all three replicas in sync",
    )
    state = group_state(group)
    assert state is not None and state.master_id == master.replica_id
    assert state.master_addr == master.addr
    open_until(driver, told_url, lambda _t: shown(driver, state), what="the state (told)")
    open_until(driver, url, lambda _t: shown(driver, state), what="the group's state")
    page = driver.find_element(By.ID, "controller-groups").text
    for replica in group.replicas.values():
        assert replica.addr in page
    screenshot(driver, "controller-mode")

    # the master's tree is lost: the page follows the election
    master.kill_tree()
    new = group.master(60)
    assert new is not master

    def after() -> BrokerGroupState | None:
        s = group_state(group)
        moved = s is not None and s.master_id == new.replica_id
        return s if moved and master.replica_id not in s.sync_state_set else None

    state2 = wait_for(after, 60, "the new master and the smaller set at the controller")
    assert state2.epoch > state.epoch
    open_until(driver, url, lambda _t: shown(driver, state2), what="the new master")
    open_until(
        driver,
        url,
        lambda _t: replica_cells(driver, master.replica_id)[3:4] == ["no"],
        what="the killed replica shown not alive",
    )
    screenshot(driver, "controller-mode-after-failover")
