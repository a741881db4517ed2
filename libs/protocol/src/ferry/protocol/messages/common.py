"""What every role stands on: the Request and Reply bases, data shapes several roles share,
and what every service answers (ping, errors, metrics)."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import msgspec

from ferry.protocol.codes import Perm, RequestCode


class _Wire(msgspec.Struct, frozen=True, tag_field="t", omit_defaults=True):
    pass


class Request(_Wire, frozen=True):
    code: ClassVar[int]


class Reply(_Wire, frozen=True):
    pass


# ---- shared data shapes ---------------------------------------------------------------------


class TopicConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = Perm.READ_WRITE
    order: bool = False


class SubscriptionData(msgspec.Struct, frozen=True, omit_defaults=True):
    topic: str
    expression: str = "*"
    expression_type: str = "TAG"  # TAG ("*", "TagA || TagB") or SQL92 (ferry.protocol.sql_filter)


class OffsetEntry(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    queue_id: int
    offset: int


class QueueStat(msgspec.Struct, frozen=True, array_like=True):
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int = 0


# ---- generic replies ------------------------------------------------------------------------


class OkReply(Reply, frozen=True, tag="ok"):
    pass


class ErrorReply(Reply, frozen=True, tag="error"):
    code: int
    message: str = ""
    retriable: bool = False


class PingRequest(Request, frozen=True, tag="ping"):
    code = RequestCode.PING


class PongReply(Reply, frozen=True, tag="pong"):
    service: str
    version: str = ""


# ---- telemetry (every service answers; remoting serves the broker group's /metrics) ---------


class MetricsRequest(Request, frozen=True, tag="metrics"):
    code = RequestCode.METRICS


class MetricSample(msgspec.Struct, frozen=True, array_like=True):
    name: str  # the family name plus _bucket, _sum, _count for histograms
    labels: dict[str, str]
    value: float


class MetricFamily(msgspec.Struct, frozen=True):
    name: str
    kind: str  # counter, gauge, histogram (Prometheus types)
    help: str
    samples: list[MetricSample]


class MetricsReply(Reply, frozen=True, tag="metrics_reply"):
    service: str
    families: list[MetricFamily] = []


def wire_tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
CommonRequest: TypeAlias = PingRequest | MetricsRequest

CommonReply: TypeAlias = OkReply | ErrorReply | PongReply | MetricsReply
