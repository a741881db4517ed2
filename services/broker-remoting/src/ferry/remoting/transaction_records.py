"""The records of a transaction: the half message a transactional send is stored as, the
copy a commit stores in the real topic, and the op records the check-back service reads
(RMQ_SYS_TRANS_OP_HALF_TOPIC, tag `d`, body: the half message's CommitLog offset)."""

from __future__ import annotations

from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import TransactionResolution
from ferry.protocol.errors import BrokerSystemError, InvalidParameterError
from ferry.protocol.messages import SendMessageRequest
from ferry.protocol.names import (
    TRAN_END_COMMITTING,
    TRAN_END_PROPERTY,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.remoting.record_edits import retopic, single_record

OP_TAG = "d"  # RocketMQ's tag of op records ("delete" the half message)
PROPERTY_TRAN_END = TRAN_END_PROPERTY  # on op records: COMMIT, ROLLBACK (COMMITTING: a mark)


def half_record(raw: Any, req: SendMessageRequest, queue_id: int) -> bytes:
    """The record a transactional send is stored as: same message, half topic, real topic
    and queue in its properties, marked TX_PREPARED and owned by the sending group."""
    if req.count != 1:
        raise InvalidParameterError("a transaction's half message is sent alone (count 1)")
    rec = single_record(raw, req.topic, "half message")
    return retopic(
        rec,
        TRANS_HALF_TOPIC,
        set_props={
            record.PROPERTY_TRAN_MSG: "true",
            record.PROPERTY_PGROUP: req.producer_group,
            record.PROPERTY_REAL_TOPIC: req.topic,
            record.PROPERTY_REAL_QID: str(queue_id),
        },
        sysflag=rec.sysflag | record.SYSFLAG_TX_PREPARED,
    )


def committed_record(half: record.Record) -> tuple[str, int, bytes]:
    """(real topic, real queue, record) of a committed half message."""
    topic = half.properties.get(record.PROPERTY_REAL_TOPIC, "")
    try:
        queue_id = int(half.properties.get(record.PROPERTY_REAL_QID, ""))
    except ValueError:
        queue_id = -1
    if not topic or queue_id < 0:
        raise BrokerSystemError(f"half message at {half.phys_offset} has no real topic/queue")
    raw = retopic(
        half,
        topic,
        drop_props=(record.PROPERTY_REAL_TOPIC, record.PROPERTY_REAL_QID),
        sysflag=(half.sysflag & ~record.SYSFLAG_TX_PREPARED) | record.SYSFLAG_TX_COMMIT,
        prepared_tx_offset=half.phys_offset,
        queue_id=queue_id,
    )
    return topic, queue_id, raw


def op_record(
    half_offset: int, resolution: TransactionResolution, born_ms: int, *, committing: bool = False
) -> bytes:
    """An op record: how the half message ended, or (committing) the mark stored before a
    commit's copy."""
    end = TRAN_END_COMMITTING if committing else resolution.name
    props = {record.PROPERTY_TAGS: OP_TAG, PROPERTY_TRAN_END: end}
    return record.encode_record(
        TRANS_OP_HALF_TOPIC.encode(),
        str(half_offset).encode(),
        record.encode_properties(props),
        born_timestamp=born_ms,
    )
