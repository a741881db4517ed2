"""The Spark source and sink against a cluster with authentication, authorization and tlsEnable
(issue 27): ferry.accessKey / ferry.secretKey / ferry.tlsServerKey reach the driver's and the
executors' clients; without them the read fails naming what is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster, start_cluster
from security_support import ROOT, SECURITY, generate_keys

from ferry.admin import Admin

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "SparkSecure"
N = 50


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    root = tmp_path_factory.mktemp("spark-secure")
    keys = root / "keys"
    overrides = {**SECURITY, **generate_keys(keys)}
    cluster = start_cluster(root, overrides=overrides)
    try:
        with Admin(
            cluster.namesrv, credentials=ROOT, tls_server_key=str(keys / "server.key")
        ) as admin:
            admin.create_topic(TOPIC, 2, 2, broker_addr=cluster.broker_addr)
        yield cluster, keys / "server.key"
    finally:
        cluster.local.stop()


def _options(cluster: Cluster, server_key: Path) -> dict[str, str]:
    return {
        "ferry.namesrv": cluster.namesrv,
        "ferry.accessKey": ROOT.access_key,
        "ferry.secretKey": ROOT.secret_key,
        "ferry.tlsServerKey": str(server_key),
    }


def test_write_then_read_with_credentials_and_the_cluster_key(
    spark: Any, secure: tuple[Cluster, Path]
) -> None:
    cluster, server_key = secure
    options = _options(cluster, server_key)
    rows = [(TOPIC, f"s-{i}") for i in range(N)]
    df = spark.createDataFrame(rows, "topic string, body string").repartition(2)
    df.write.format("ferry").options(**options).mode("append").save()
    read = spark.read.format("ferry").options(**options).option("subscribe", TOPIC).load()
    bodies = {bytes(r.body).decode() for r in read.collect()}
    assert bodies == {body for _, body in rows}


def test_a_read_without_credentials_is_refused_saying_why(
    spark: Any, secure: tuple[Cluster, Path]
) -> None:
    cluster, server_key = secure
    options = _options(cluster, server_key)
    del options["ferry.accessKey"], options["ferry.secretKey"]
    with pytest.raises(Exception, match=r"AUTH_NO_CREDENTIALS|needs credentials"):
        spark.read.format("ferry").options(**options).option("subscribe", TOPIC).load().collect()
    partial = {**_options(cluster, server_key)}
    del partial["ferry.secretKey"]
    with pytest.raises(Exception, match=r"ferry\.secretKey"):
        spark.read.format("ferry").options(**partial).option("subscribe", TOPIC).load().collect()
