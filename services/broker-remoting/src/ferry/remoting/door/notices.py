"""What the broker sends a RocketMQ client unasked, as the requests RocketMQ uses for them:
oneway, so the client answers nothing (a transaction check is answered by an END_TRANSACTION
of its own)."""

from __future__ import annotations

from ferry.protocol import record
from ferry.protocol.messages import AnyReply, CheckTransactionStateNotice, ConsumerIdsChangedNotice
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand


def to_notice(body: AnyReply) -> RemotingCommand | None:
    if isinstance(body, ConsumerIdsChangedNotice):
        return RemotingCommand(
            code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            flag=ONEWAY_FLAG,
            ext_fields={"consumerGroup": body.consumer_group},
        )
    if isinstance(body, CheckTransactionStateNotice):
        fields = {
            "tranStateTableOffset": str(body.tran_state_table_offset),
            "commitLogOffset": str(body.commit_log_offset),
            "msgId": body.msg_id,
            "transactionId": body.transaction_id or body.msg_id,
        }
        try:
            half = next(record.iter_records(body.record))
            fields["offsetMsgId"] = record.offset_msg_id(half.store_host, half.phys_offset)
        except (record.RecordError, StopIteration):
            pass
        return RemotingCommand(
            code=RequestCode.CHECK_TRANSACTION_STATE,
            flag=ONEWAY_FLAG,
            ext_fields=fields,
            body=body.record,  # the stored half message, in the layout clients decode
        )
    return None
