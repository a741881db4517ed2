"""ReviveService: pop consumption's invisibility, kept durable in the revive topic.

Remoting hands every pop's checkpoint here (pop_checkpoint); acks and changes of invisible
time come here through remoting too. This service is the revive topic's only writer: it
stores each checkpoint and ack as a record of `rmq_sys_REVIVE_LOG_<cluster>` queue 0 (so the
CommitLog holds them, and HA takes them to the slaves), applies it to its table once stored,
and answers. Every REVIVE_INTERVAL_S it copies the messages whose invisible time passed
un-acked to %RETRY%<group> (reconsume times + 1) or, out of reconsume times, to %DLQ%<group>,
then stores an ack marking them revived.

A restart reads the revive log from the oldest checkpoint in flight (saved in revive.json)
to its end before it answers anything. A crash between a revived copy and its ack revives
that message once more: delivery is at least once, as in RocketMQ.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode
from ferry.protocol.errors import FerryError, ServiceNotAvailableError
from ferry.protocol.messages import (
    AckMessageRequest,
    AnyReply,
    BatchAckMessageReply,
    BatchAckMessageRequest,
    ChangeInvisibleTimeReply,
    ChangeInvisibleTimeRequest,
    ErrorReply,
    OkReply,
    PopCheckpoint,
    PopCheckpointReply,
    PopCheckpointRequest,
    ReviveAck,
    ReviveAcks,
    ReviveRecord,
    StoreGetReply,
    StoreGetRequest,
    StorePutReply,
    StorePutRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import revive_topic
from ferry.protocol.retry_copy import plan_send_back
from ferry.runtime.service import Call, Peer, Service
from ferry.scheduler.revive_table import InFlight, ReviveTable, receipt_handle

log = logging.getLogger("ferry.scheduler.revive")

REVIVE_INTERVAL_S = 0.2
MAX_REVIVING = 32  # copies in flight at once
READ_BATCH = 256
STORE_TIMEOUT_S = 10.0
RETRY_S = 1.0
FILE_NAME = "revive.json"
# remoting waits 10 s for a checkpoint to be stored (pop.py STORE_TIMEOUT_S); one that comes
# later than this is refused, so that a stored one is always one remoting still waits for
CHECKPOINT_MAX_AGE_MS = 8_000

Done = Callable[[int | FerryError], None]


class _ReviveProgress(msgspec.Struct):
    offset: int = 0  # revive queue offset a restart reads from


def now_ms() -> int:
    return int(time.time() * 1000)


class ReviveService:
    name = "revive"

    def __init__(self, service: Service, store: Peer, cluster: str, root: Path) -> None:
        self._service = service
        self._store = store
        self.topic = revive_topic(cluster)
        self._path = root / FILE_NAME
        self.table = ReviveTable()
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(ReviveRecord)
        self.ready = False
        self.stopped = True
        self._reviving = 0
        self._saved = -1
        self._queued: list[tuple[list[ReviveRecord], Done]] = []
        self._flush_soon = False
        service.on(PopCheckpointRequest, self._checkpoint)
        service.on(AckMessageRequest, self._ack)
        service.on(BatchAckMessageRequest, self._batch_ack)
        service.on(ChangeInvisibleTimeRequest, self._change)

    # ---- component ----

    def start(self) -> None:
        self.stopped = False
        offset = 0
        try:
            offset = msgspec.json.decode(self._path.read_bytes(), type=_ReviveProgress).offset
        except FileNotFoundError:
            pass  # first start (or a slave's first as master): the whole revive log
        except (OSError, msgspec.DecodeError) as exc:
            log.warning(
                "%s unreadable (%s): the revive log is read from its start", self._path, exc
            )
        self.table.log_end = offset
        self._read_log(offset)

    def stop(self) -> None:
        self.stopped = True
        if self.ready:
            self._save()

    def status(self) -> dict[str, str]:
        out = {"reviveLogOffset": str(self.table.log_end)}
        inflight = self.table.in_flight_by_group()
        for group, f in sorted(self.table.figures.items()):
            out[f"pop.{group}.popped"] = str(f.popped)
            out[f"pop.{group}.acked"] = str(f.acked)
            out[f"pop.{group}.revived"] = str(f.revived)
            out[f"pop.{group}.inFlight"] = str(inflight.get(group, 0))
        return out

    # ---- start-up: read the revive log back ----

    def _read_log(self, offset: int) -> None:
        def on_get(body: AnyReply, frames: list[Any]) -> None:
            if self.stopped:
                return
            if not isinstance(body, StoreGetReply):
                log.warning("reading the revive log failed (%s); asking again", body)
                self._service.later(RETRY_S, lambda: self._read_log(offset))
                return
            if body.status == PullStatus.FOUND and frames:
                for rec in record.iter_records(bytes(frames[0])):
                    self._apply_stored(rec)
            if body.next_begin_offset > offset:  # more, or retention moved the start
                self._read_log(body.next_begin_offset)
                return
            self.ready = True
            log.info(
                "revive log read to %d: %d checkpoint(s) in flight",
                self.table.log_end,
                len(self.table.in_flight),
            )
            self._service.every(REVIVE_INTERVAL_S, self._tick)

        self._store.request(
            StoreGetRequest(topic=self.topic, queue_id=0, queue_offset=offset, max_msgs=READ_BATCH),
            on_get,
            timeout_s=STORE_TIMEOUT_S,
        )

    def _apply_stored(self, rec: record.Record) -> None:
        try:
            decoded = self._decoder.decode(rec.body)
        except msgspec.DecodeError:
            log.error("revive log record at %d unreadable; skipped", rec.queue_offset)
            return
        self.table.apply(rec.queue_offset, decoded)

    # ---- storing revive records ----

    def _put(self, records: list[ReviveRecord], done: Done) -> None:
        """Stores the records; done(queue offset of their first checkpoint) once stored, or
        done(FerryError). What is asked for in one turn of the loop (the acks of a batch)
        travels in one store put."""
        self._queued.append((records, done))
        if not self._flush_soon:
            self._flush_soon = True
            self._service.later(0, self._flush)

    def _flush(self) -> None:
        """One put for what was asked in this turn: the checkpoints, then every ack merged
        into one record (a batch ack of 128 is one record, not 128)."""
        self._flush_soon = False
        batch, self._queued = self._queued, []
        checkpoints = [r for records, _ in batch for r in records if isinstance(r, PopCheckpoint)]
        acks = [r for records, _ in batch for r in records if isinstance(r, ReviveAck)]
        stored: list[ReviveRecord] = list(checkpoints)
        if len(acks) == 1:
            stored += acks
        elif acks:
            stored.append(
                ReviveAcks(
                    acked=[(a.ck, a.index) for a in acks if not a.revived],
                    revived=[(a.ck, a.index) for a in acks if a.revived],
                )
            )
        topic = self.topic.encode()
        raws = [record.encode_record(topic, self._encoder.encode(r), b"") for r in stored]

        def on_put(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StorePutReply):
                for i, r in enumerate(stored):
                    self.table.add(body.queue_offset + i, r)
                offset = body.queue_offset  # each requester's first checkpoint
                for records, done in batch:
                    done(offset)
                    offset += sum(isinstance(r, PopCheckpoint) for r in records)
                return
            why = body.message if isinstance(body, ErrorReply) else type(body).__name__
            for _, done in batch:
                done(ServiceNotAvailableError(f"revive log put failed: {why}"))

        self._store.request(
            StorePutRequest(topic=self.topic, queue_id=0, count=len(raws)),
            on_put,
            [b"".join(raws)],
            timeout_s=STORE_TIMEOUT_S,
        )

    def _check_ready(self) -> None:
        if not self.ready:
            raise ServiceNotAvailableError("the revive log is still being read; ask again")

    # ---- requests ----

    def _checkpoint(self, req: PopCheckpointRequest, call: Call) -> None:
        self._check_ready()
        ck = req.checkpoint
        if now_ms() - ck.pop_ms > CHECKPOINT_MAX_AGE_MS:
            # queued while this service was down: remoting has answered that pop as failed
            # and not advanced the offset, so these messages are popped again; storing it
            # would revive them twice
            raise ServiceNotAvailableError("checkpoint too old: its pop has given up")

        def done(result: int | FerryError) -> None:
            if isinstance(result, FerryError):
                call.fail(result)
                return
            n = len(ck.queue_offsets)
            handles = [receipt_handle(result, i, ck.revive_at_ms) for i in range(n)]
            call.reply(PopCheckpointReply(ck=result, handles=handles))

        self._put([ck], done)

    def _ack(self, req: AckMessageRequest, call: Call) -> None:
        self._check_ready()
        ck, entry, index = self.table.check(
            req.receipt_handle, req.consumer_group, req.topic, now_ms()
        )
        entry.reviving.add(index)  # no second ack or revival while this one is stored

        def done(result: int | FerryError) -> None:
            if isinstance(result, FerryError):
                entry.reviving.discard(index)
                call.fail(result)
            else:
                call.reply(OkReply())

        self._put([ReviveAck(ck=ck, index=index)], done)

    def _batch_ack(self, req: BatchAckMessageRequest, call: Call) -> BatchAckMessageReply | None:
        self._check_ready()
        now = now_ms()
        codes: list[int] = []
        messages: list[str] = []
        acks: list[ReviveRecord] = []
        held: list[tuple[InFlight, int]] = []
        for e in req.entries:
            try:
                ck, entry, index = self.table.check(
                    e.receipt_handle, req.consumer_group, e.topic, now
                )
            except FerryError as err:
                codes.append(err.code)
                messages.append(str(err))
                continue
            entry.reviving.add(index)
            held.append((entry, index))
            acks.append(ReviveAck(ck=ck, index=index))
            codes.append(0)
            messages.append("")
        if not acks:
            return BatchAckMessageReply(codes=codes, messages=messages)

        def done(result: int | FerryError) -> None:
            if isinstance(result, FerryError):
                for entry, index in held:
                    entry.reviving.discard(index)
                call.fail(result)
            else:
                call.reply(BatchAckMessageReply(codes=codes, messages=messages))

        self._put(acks, done)
        return None

    def _change(self, req: ChangeInvisibleTimeRequest, call: Call) -> None:
        self._check_ready()
        now = now_ms()
        ck, entry, index = self.table.check(req.receipt_handle, req.consumer_group, req.topic, now)
        entry.reviving.add(index)
        old = entry.checkpoint
        revive_at = now + max(req.invisible_ms, 0)
        moved = msgspec.structs.replace(
            old,
            pop_ms=now,
            revive_at_ms=revive_at,
            queue_offsets=[old.queue_offsets[index]],
            phys_offsets=[old.phys_offsets[index]],
        )

        def done(result: int | FerryError) -> None:
            if isinstance(result, FerryError):
                entry.reviving.discard(index)
                call.fail(result)
            else:
                self.table.figures[old.group].popped -= 1  # the same message, moved
                call.reply(ChangeInvisibleTimeReply(receipt_handle(result, 0, revive_at)))

        # the new checkpoint first: a crash between the two revives it twice, never not at all
        self._put([moved, ReviveAck(ck=ck, index=index)], done)

    # ---- reviving ----

    def _tick(self) -> None:
        if self.stopped:
            return
        for ck, index in self.table.due(now_ms()):
            if self._reviving >= MAX_REVIVING:
                break
            self._revive(ck, index)
        self._save()

    def _revive(self, ck: int, index: int) -> None:
        entry = self.table.in_flight[ck]
        entry.reviving.add(index)
        self._reviving += 1
        c = entry.checkpoint

        def give_up(why: str) -> None:
            self._reviving -= 1
            entry.reviving.discard(index)  # the next tick tries again
            log.warning("revive of %s#%d failed: %s", c.queue_topic, c.queue_offsets[index], why)

        def on_view(body: AnyReply, frames: list[Any]) -> None:
            gone = isinstance(body, ErrorReply) and body.code == ResponseCode.QUERY_NOT_FOUND
            if gone:  # deleted by retention: nothing to bring back
                self._settle_revived(ck, index, entry)
                return
            if not isinstance(body, ViewMessageReply) or not frames:
                give_up(body.message if isinstance(body, ErrorReply) else type(body).__name__)
                return
            rec = next(record.iter_records(bytes(frames[0])))
            plan = plan_send_back(
                rec, c.group, delay_level=0, max_reconsume_times=c.max_reconsume_times,
                origin_topic=c.topic, immediate=True,
            )  # fmt: skip
            if plan.to_dlq:
                self.table.count_dead(c.group)

            def on_put(reply: AnyReply, _frames: list[Any]) -> None:
                if isinstance(reply, StorePutReply):
                    self._settle_revived(ck, index, entry)
                else:
                    give_up(reply.message if isinstance(reply, ErrorReply) else "bad reply")

            self._store.request(
                StorePutRequest(topic=plan.topic, queue_id=0, count=1, store_host=rec.store_host),
                on_put,
                [plan.record],
                timeout_s=STORE_TIMEOUT_S,
            )

        view = ViewMessageRequest(phys_offset=c.phys_offsets[index])
        self._store.request(view, on_view, timeout_s=STORE_TIMEOUT_S)

    def _settle_revived(self, ck: int, index: int, entry: InFlight) -> None:
        def done(result: int | FerryError) -> None:
            self._reviving -= 1
            if isinstance(result, FerryError):
                entry.reviving.discard(index)  # revived again later: at least once
                log.warning("revived ack not stored: %s", result)

        self._put([ReviveAck(ck=ck, index=index, revived=True)], done)

    def _save(self) -> None:
        offset = self.table.oldest()
        if offset == self._saved:
            return
        tmp = self._path.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(_ReviveProgress(offset)))
        tmp.replace(self._path)
        self._saved = offset
